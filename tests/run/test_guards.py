"""NaN/inf guard in training: stop at the first non-finite value, never save one,
resume from the last finite checkpoint."""
import math
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.run import guards
from daca_jax.run.checkpoint import Checkpointer
from daca_jax.errors import NonFiniteError
from daca_jax.run.metrics import read_metrics
from daca_jax.models import init_model, make_logits_fn
from daca_jax.run.task_views import build_task
from daca_jax.run.pipeline import run_main_job
from daca_jax.run.sft_loop import run_sft
from daca_jax.rl.learner import GRPOLearner
from tests.smoke_config import smoke

REPO = pathlib.Path(__file__).resolve().parents[2]
quiet = lambda *a, **k: None


def test_nonfinite_code_names_the_first_quantity_in_order():
  ok = {"loss": jnp.float32(1.0), "grad_norm": jnp.float32(2.0), "params": {"w": jnp.ones(3)},
        "opt_state": (jnp.int32(7), jnp.zeros(2))}
  assert int(guards.nonfinite_code(ok)) == 0
  bad_params = dict(ok, params={"w": jnp.array([1.0, jnp.inf, 0.0])})
  assert int(guards.nonfinite_code(bad_params)) == 3
  both = dict(bad_params, grad_norm=jnp.float32(jnp.nan))
  assert int(guards.nonfinite_code(both)) == 2  # gradient norm comes before parameters
  assert int(guards.nonfinite_code(dict(ok, opt_state=(jnp.int32(1), jnp.array([jnp.nan, 0.0]))))) == 4
  assert int(guards.nonfinite_code({"credit": None, "loss": jnp.float32(-jnp.inf)})) == 1
  with pytest.raises(KeyError):
    guards.nonfinite_code({"weights": jnp.ones(2)})


def test_keep_finite_refuses_the_update_and_the_flag_sticks():
  @jax.jit
  def step(state, flag, i, x):
    new = {"params": state["params"] + x}
    return guards.keep_finite(state, new, flag, i, loss=jnp.sum(new["params"]))

  state, flag = {"params": jnp.zeros(2)}, guards.clear_flag()
  state, flag = step(state, flag, 1, jnp.ones(2))
  assert np.asarray(state["params"]).tolist() == [1.0, 1.0] and int(flag[1]) == 0
  state, flag = step(state, flag, 2, jnp.array([jnp.nan, 1.0]))
  assert np.asarray(state["params"]).tolist() == [1.0, 1.0]  # refused: the last finite state
  assert np.asarray(flag).tolist() == [2, 1]  # step 2, the loss (checked before the parameters)
  state, flag = step(state, flag, 3, jnp.ones(2))  # finite again, but the run is already stopped
  assert np.asarray(state["params"]).tolist() == [1.0, 1.0] and np.asarray(flag).tolist() == [2, 1]
  with pytest.raises(NonFiniteError, match=r"^SFT step 2: the loss is not finite") as e:
    guards.check("SFT", flag)
  assert (e.value.phase, e.value.step, e.value.quantity) == ("SFT", 2, "loss")
  guards.check("SFT", guards.clear_flag())  # a clear flag passes


def _all_finite(state):
  return all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(state)
             if np.asarray(x).dtype.kind == "f")


def test_diverging_sft_stops_at_the_first_bad_step_and_resumes_from_the_last_finite(tmp_path):
  # 10 good steps (checkpoint 10), then the run continued with a learning rate of 10: the first
  # update of the resumed run (step 11) moves the parameters by ~10, and the model (wrapped to give
  # NaN logits once a parameter exceeds 5, as an overflowing model would) returns a NaN loss at
  # step 12. With 100 steps the loop reads the sticky flag every 5 steps, at step 15: the error
  # must still name step 12 and the loss, steps 12-14 must not have been applied, nothing after
  # checkpoint 10 saved, and no metrics logged past step 10.
  cfg = smoke(sft__steps=10)
  task = build_task(cfg)
  examples = task.train_examples(cfg.sft.num_train_examples, cfg.seed)
  graphdef, params = init_model(cfg.model, cfg.seed)
  logits_fn = make_logits_fn(graphdef)

  def overflowing(prm, tokens):
    big = jnp.max(jnp.stack([jnp.max(jnp.abs(x)) for x in jax.tree.leaves(prm)])) > 5.0
    return logits_fn(prm, tokens) * jnp.where(big, jnp.nan, 1.0)

  sft_dir = tmp_path / "sft"
  run_sft(cfg.sft, cfg.checkpoint, task, examples, overflowing, params, sft_dir, seed=cfg.seed,
          gen_length=cfg.rollout.gen_length, show_progress=False, log=quiet)
  bad = smoke(sft__steps=100, sft__learning_rate=10.0, sft__warmup_steps=0)
  with pytest.raises(NonFiniteError, match=r"^SFT step 12: the loss is not finite") as e:
    run_sft(bad.sft, bad.checkpoint, task, examples, overflowing, params, sft_dir, seed=bad.seed,
            gen_length=bad.rollout.gen_length, show_progress=False, log=quiet)
  assert (e.value.phase, e.value.step, e.value.quantity) == ("SFT", 12, "loss")
  assert f"{sft_dir}/10; a rerun resumes from it" in str(e.value)
  ck = Checkpointer(sft_dir)
  assert ck.all_steps() == [10]  # nothing was saved after the divergence
  ck.close()
  # Logged every step by the 10-step run, then every 5 steps: nothing past the last finite step 10.
  assert [r["step"] for r in read_metrics(sft_dir.with_name("sft_metrics.jsonl"))] == list(range(1, 11))


def test_diverging_rl_run_stops_with_one_line_and_a_rerun_resumes(tmp_path):
  # Today's probe: rl.learning_rate=1e10 finished with rc 0 and a checkpoint rl/3 whose 26976
  # parameters were all NaN.
  proc = subprocess.run(
      [sys.executable, "experiments/train.py", "--config=configs/sudoku_tiny.py:smoke", f"--workdir={tmp_path}",
       "--progress=false", "--config.rl.learning_rate=1e10"], cwd=REPO, capture_output=True, text=True,
      timeout=1200)
  assert proc.returncode == 3, proc.stderr[-3000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error: RL step ") and "is not finite" in last, last
  assert "Traceback" not in proc.stderr
  step = int(last.split("RL step ")[1].split(":")[0])
  assert not (tmp_path / "results.json").exists()
  ck = Checkpointer(tmp_path / "rl")
  saved = ck.all_steps()
  assert saved and max(saved) < step
  cfg = smoke(rl__learning_rate=1e10)
  gd, params = init_model(cfg.model, cfg.seed)
  target = {"params": params, "opt_state": GRPOLearner(make_logits_fn(gd), cfg, mask_id=257, eos_id=258)
            .init_opt_state(params)}
  for s in saved:
    assert _all_finite(ck.restore(s, target)[0]), f"checkpoint rl/{s} holds non-finite values"
  # What the old code left behind: a later checkpoint whose parameters are all NaN (its checksum is
  # valid). A rerun must not resume from it.
  latest = ck.restore(max(saved), target)[0]
  ck.save(step, dict(latest, params=jax.tree.map(lambda x: x * jnp.nan, latest["params"])))
  ck.close()
  records = read_metrics(tmp_path / "metrics.jsonl")
  assert [r["step"] for r in records] == list(range(1, step))
  assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in records)
  # The rerun resumes from the last finite checkpoint and, the divergence being deterministic,
  # stops at the same step for the same reason.
  logs = []
  with pytest.raises(NonFiniteError) as e:
    run_main_job(cfg, tmp_path, show_progress=False, log=logs.append)
  assert any(f"rl/{step} is unreadable" in line and "non-finite parameters" in line for line in logs), logs
  assert f"RL: resuming from iteration {max(saved)}." in logs
  assert (e.value.phase, e.value.step) == ("RL", step) and f"the {e.value.quantity} is" in last
  ck = Checkpointer(tmp_path / "rl")
  assert ck.all_steps() == saved  # the NaN one was set aside, nothing new saved
  ck.close()
