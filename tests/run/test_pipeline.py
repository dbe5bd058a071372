"""End to end: the smoke preset of the main job, caching, resumption, and a killed run."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from configs import sudoku_tiny
from daca_jax.run.checkpoint import Checkpointer
from daca_jax.run.metrics import read_metrics
from daca_jax.run.pipeline import run_main_job
from daca_jax.config.configure import train_config_from_dict
from daca_jax.errors import ConfigError
from tests.run.interrupt import run_preempted_after

REPO = pathlib.Path(__file__).resolve().parents[2]
CMD = [sys.executable, "experiments/train.py", "--config=configs/sudoku_tiny.py:smoke", "--progress=false"]


def _run(args, timeout=300):
  return subprocess.run(CMD + args, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_smoke_run_writes_results_and_reuses_cache(tmp_path):
  # Runs refused up front leave the workdir usable (no lock, no half-written state) ...
  bad = _run([f"--workdir={tmp_path}", "--config.rl.prompts_per_step=500"])
  assert bad.returncode == 2 and "rl.prompts_per_step=500" in bad.stderr and "Traceback" not in bad.stderr
  csv = tmp_path / "bad.csv"
  csv.write_text("Puzzle,Solution\n12ab,1234\n")
  bad = _run([f"--workdir={tmp_path}", f"--config.task.eval_path={csv}"])
  assert bad.returncode == 2 and "bad.csv:2" in bad.stderr and "Traceback" not in bad.stderr
  # ... for the real run that follows in the same workdir.
  proc = _run([f"--workdir={tmp_path}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  res = json.loads((tmp_path / "results.json").read_text())
  for phase in ("eval_before", "eval_after"):
    for k in ("strict_solved", "cell_accuracy"):
      assert 0.0 <= res[phase][k] <= 1.0
    assert res[phase]["num_examples"] == 32
  # the main job trains SML alone (uniform credit: configs/sudoku_tiny.py says why); the paper presets keep DPS
  assert res["config"]["rl"]["credit"] == "uniform" and res["config"]["rl"]["likelihood"] == "stratified"
  records = read_metrics(tmp_path / "metrics.jsonl")
  assert [r["step"] for r in records] == [1, 2, 3]
  assert min(r["zero_std_groups"] for r in records) < 1.0, "no group had a reward spread: RL got no signal"
  assert (tmp_path / "reward_curve.png").stat().st_size > 1000
  assert "strict_solved" in proc.stdout and "before RL" in proc.stdout
  again = _run([f"--workdir={tmp_path}"])
  assert again.returncode == 0
  assert "reusing the cached model" in again.stdout
  res2 = json.loads((tmp_path / "results.json").read_text())
  assert res2["eval_after"] == res["eval_after"]
  assert res2["timings"] == res["timings"], "a cached rerun must keep the timings of the real run"
  # An allowed change of the evaluation settings recomputes the cached evaluations.
  third = _run([f"--workdir={tmp_path}", "--config.task.num_eval_examples=16"])
  assert third.returncode == 0, third.stderr[-3000:]
  res3 = json.loads((tmp_path / "results.json").read_text())
  assert res3["eval_before"]["num_examples"] == res3["eval_after"]["num_examples"] == 16


@pytest.mark.slow  # the flags' parsing is in test_config; the methods run in-process below
def test_d1_baseline_by_flags(tmp_path):
  proc = _run([f"--workdir={tmp_path}", "--config.rl.credit=uniform", "--config.rl.likelihood=mean_field"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  cfg = json.loads((tmp_path / "results.json").read_text())["config"]
  assert cfg["rl"]["credit"] == "uniform" and cfg["rl"]["likelihood"] == "mean_field"


def _smoke_cfg(**rl):
  c = sudoku_tiny.get_config("smoke")
  c.checkpoint.every = 2
  for k, v in rl.items():
    c.rl[k] = v
  return train_config_from_dict(c)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
  """One uninterrupted 4-iteration run (checkpoints at 2 and 4), read by the tests below: the reference
  of the resumed run, and the workdir whose latest checkpoint the fallback test damages (in a copy)."""
  workdir = tmp_path_factory.mktemp("straight")
  run_main_job(_smoke_cfg(steps=4), workdir, show_progress=False, log=lambda *a, **k: None)
  return workdir


def test_resumed_run_continues_the_same_run(straight, tmp_path):
  quiet = lambda *a, **k: None
  split = tmp_path / "split"
  run_preempted_after(2, run_main_job, _smoke_cfg(steps=4), split, show_progress=False, log=quiet)
  # The same run of another length is another run: the cosine schedule decays over rl.steps.
  with pytest.raises(ConfigError, match=r"rl\.steps=6 is not allowed: expected 4 as in the run .*'cosine' the learning rate decays"):
    run_main_job(_smoke_cfg(steps=6), split, show_progress=False, log=quiet)
  run_main_job(_smoke_cfg(steps=4), split, show_progress=False, log=quiet)  # resumed
  states = []
  for d in (straight, split):
    ck = Checkpointer(d / "rl")
    assert ck.latest_step() == 4
    states.append(ck.restore(4, ck_target(d))[0])
    ck.close()
  leaves = [jax.tree.leaves(s) for s in states]
  assert len(leaves[0]) == len(leaves[1])
  for a, b in zip(*leaves):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  m1, m2 = read_metrics(straight / "metrics.jsonl"), read_metrics(split / "metrics.jsonl")
  assert [r["step"] for r in m2] == [1, 2, 3, 4]
  for a, b in zip(m1, m2):
    for k in ("reward_mean", "loss", "kl", "grad_norm"):
      assert a[k] == b[k], (k, a, b)
  # Every checkpoint keeps the data iterator's position beside the model (daca_jax.data.loader).
  for phase, step in (("rl", 2), ("rl", 4), ("sft", 40)):
    meta = json.loads((split / phase / str(step) / "metadata" / "metadata").read_text())
    assert meta["data"] == {"next_index": step} and meta["step"] == step, (phase, meta)


def test_a_resume_reads_the_saved_data_position(straight, tmp_path):
  """The saved iterator state is what the resumed run's batches start from: a checkpoint whose data position
  disagrees with its model's step is refused before any batch is drawn."""
  import shutil
  from daca_jax.errors import DataError
  work = tmp_path / "copy"
  shutil.copytree(straight, work)
  shutil.rmtree(work / "rl" / "4")
  (work / "results.json").unlink()
  meta_file = work / "rl" / "2" / "metadata" / "metadata"
  meta = json.loads(meta_file.read_text())
  meta_file.write_text(json.dumps(dict(meta, data={"next_index": 3})))
  with pytest.raises(DataError, match=r"rl/2: the data iterator's saved state \{'next_index': 3\} is not at step 2"):
    run_main_job(_smoke_cfg(steps=4), work, show_progress=False, log=lambda *a, **k: None)


def ck_target(workdir):
  """The RL state pytree structure, rebuilt the way the pipeline builds it."""
  from daca_jax.models import init_model, make_logits_fn
  from daca_jax.rl.learner import GRPOLearner
  cfg = _smoke_cfg()
  gd, params = init_model(cfg.model, cfg.seed)
  learner = GRPOLearner(make_logits_fn(gd), cfg, mask_id=257, eos_id=258)
  return {"params": params, "opt_state": learner.init_opt_state(params)}


def test_killed_run_resumes_from_last_checkpoint(tmp_path):
  # 10 iterations: the kill lands after the first checkpoint (3) with several iterations still to run
  args = [f"--workdir={tmp_path}", "--config.rl.steps=10", "--config.checkpoint.every=3"]
  proc = subprocess.Popen(CMD + args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          start_new_session=True)
  rl_dir = tmp_path / "rl"
  deadline = time.time() + 120
  while time.time() < deadline:
    done = [p for p in rl_dir.glob("*") if p.name.isdigit() and (p / "commit_success.txt").exists()] \
        if rl_dir.exists() else []
    if done:
      break
    time.sleep(0.2)
  assert proc.poll() is None, "run finished before it could be killed"
  os.killpg(proc.pid, signal.SIGKILL)
  proc.wait()
  assert not (tmp_path / "results.json").exists()
  again = _run(args)
  assert again.returncode == 0, again.stderr[-3000:]
  assert "RL: resuming from iteration" in again.stdout
  steps = [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")]
  assert steps == list(range(1, 11))
  assert json.loads((tmp_path / "results.json").read_text())["eval_after"]["num_examples"] == 32


def _slow(*values):
  pytest = __import__("pytest")
  return pytest.param(*values, marks=pytest.mark.slow)


# One end-to-end run in the default suite, with a non-default objective and a non-default likelihood
# together: the config reaches both through the main job (the default pair runs in the tests above).
# Each objective's loss and gradient are checked against numpy in tests/rl/test_objectives.py, each
# estimator in tests/likelihood; the other pairs run here with --runslow.
@__import__("pytest").mark.parametrize("objective,likelihood", [
    _slow("wd1", "stratified"), _slow("gspo", "stratified"), _slow("gdpo", "stratified"),
    _slow("reinforce_pp", "stratified"), _slow("diffu_grpo", "trajectory"), ("gdpo", "trajectory"),
    _slow("gdpo", "elbo"), _slow("diffu_grpo", "coupled")])
def test_every_base_method_and_estimator_by_config(tmp_path, objective, likelihood):
  c = sudoku_tiny.get_config("smoke")
  c.rl.objective = objective
  c.rl.likelihood = likelihood
  c.rl.steps = 2
  c.sft.steps = 10
  c.task.num_eval_examples = 8
  c.eval.batch_size = 8
  res = run_main_job(train_config_from_dict(c), tmp_path, show_progress=False, log=lambda *a, **k: None)
  assert res["config"]["rl"]["objective"] == objective and res["config"]["rl"]["likelihood"] == likelihood
  records = read_metrics(tmp_path / "metrics.jsonl")
  assert [r["step"] for r in records] == [1, 2]
  assert all(np.isfinite(r["loss"]) and np.isfinite(r["grad_norm"]) for r in records)


def test_damaged_latest_checkpoint_falls_back_and_shorter_rerun_is_refused(straight, tmp_path):
  import shutil
  from daca_jax.errors import ConfigError
  quiet = lambda *a, **k: None
  tmp_path = tmp_path / "run"
  shutil.copytree(straight, tmp_path)  # the same 4-iteration run as made in place (the shared one stays whole)
  before = read_metrics(tmp_path / "metrics.jsonl")
  # Damage the latest RL checkpoint's array data; the run must resume from step 2 and redo 3 and 4.
  shutil.rmtree(tmp_path / "rl" / "4" / "state")
  (tmp_path / "eval_after.json").unlink()
  logs = []
  run_main_job(_smoke_cfg(steps=4), tmp_path, show_progress=False, log=logs.append)
  assert any("unreadable" in line for line in logs)
  after = read_metrics(tmp_path / "metrics.jsonl")
  assert [r["step"] for r in after] == [1, 2, 3, 4]
  assert [r["reward_mean"] for r in after] == [r["reward_mean"] for r in before]
  # A shorter rerun is another run (the cosine schedule spans rl.steps): refused before any work.
  with __import__("pytest").raises(ConfigError, match=r"rl\.steps=2 is not allowed: expected 4 as in the run"):
    run_main_job(_smoke_cfg(steps=2), tmp_path, show_progress=False, log=quiet)


def test_periodic_evaluation_uses_a_held_out_validation_split(tmp_path):
  from daca_jax.errors import ConfigError
  from daca_jax.run.task_views import build_task
  c = sudoku_tiny.get_config("smoke")
  c.rl.eval_every = 2
  with __import__("pytest").raises(ConfigError, match=r"rl\.eval_every=2.*num_val_examples"):
    train_config_from_dict(c)
  c.task.num_val_examples = 16
  c.rl.steps = 3
  cfg = train_config_from_dict(c)
  res = run_main_job(cfg, tmp_path, show_progress=False, log=lambda *a, **k: None)
  records = read_metrics(tmp_path / "metrics.jsonl")
  assert [r["step"] for r in records if "val/strict_solved" in r] == [2, 3]  # every 2 and the last
  assert records[-1]["val/num_examples"] == 16 and "val/strict_solved" not in records[0]
  assert res["val_before"]["num_examples"] == 16 and res["val_after"]["num_examples"] == 16
  assert "grad_cos" in records[-1] and res["grad_agreement"]["iterations"] == 2
  # every evaluation's per-example outcomes are named in results.json and pool to its metrics
  assert res["outcomes"] == {"eval_before": "eval_before.outcomes.jsonl", "eval_after": "eval_after.outcomes.jsonl",
                             "val_before": "val_before.outcomes.jsonl", "val_after": "val_step3.outcomes.jsonl"}
  for name, metrics in (("eval_after", res["eval_after"]), ("val_before", res["val_before"]),
                        ("val_after", res["val_after"])):
    rows = [json.loads(line) for line in (tmp_path / res["outcomes"][name]).read_text().splitlines()]
    assert len(rows) == metrics["num_examples"] and sum(r["strict_solved"] for r in rows) / len(rows) == \
        metrics["strict_solved"], name
  assert (tmp_path / "val_step2.outcomes.jsonl").exists()
  # the split is drawn with the training pool, after the training items, and disjoint from both sets
  task = build_task(cfg)
  pool = task.train_examples(cfg.sft.num_train_examples + 16, cfg.seed)
  train = {e.prompt for e in task.train_examples(cfg.sft.num_train_examples, cfg.seed)}
  val = [e.prompt for e in pool[cfg.sft.num_train_examples:]]
  assert train == {e.prompt for e in pool[:cfg.sft.num_train_examples]}
  assert not set(val) & train and not set(val) & {e.prompt for e in task.eval_examples()[0]}
  gens = [__import__("json").loads(l)["prompt"] for l in open(tmp_path / "val_before.generations.jsonl")]
  assert gens == val
  # the validation file names its own source, not the evaluation set's
  source = __import__("json").loads((tmp_path / "val_before.json").read_text())["fingerprint"]["source"]
  assert source.startswith("validation split: training-pool items") and "test" not in source


def test_a_constant_schedule_run_extends_and_refuses_a_shorter_rerun(tmp_path):
  """Under a constant learning rate rl.steps may grow on resume (the iterations done are the new run's
  first ones); a shorter rerun is refused before any work."""
  quiet = lambda *a, **k: None
  run_main_job(_smoke_cfg(steps=2, lr_schedule="constant"), tmp_path, show_progress=False, log=quiet)
  with pytest.raises(ConfigError, match=r"rl\.steps=1 is not allowed: expected >= 2, the iteration this run"):
    run_main_job(_smoke_cfg(steps=1, lr_schedule="constant"), tmp_path, show_progress=False, log=quiet)
  lines = []
  run_main_job(_smoke_cfg(steps=3, lr_schedule="constant"), tmp_path, show_progress=False, log=lines.append)
  assert "RL: resuming from iteration 2." in lines
  assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]
