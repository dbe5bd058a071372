"""SIGTERM (preemption, a time limit): the checkpoint of the current step, exit status 75, and a rerun
of the same command that equals an uninterrupted run (metrics lines, final parameters, evaluations).

The uninterrupted reference runs in this process; the preempted runs are ``experiments/train.py``
subprocesses receiving real signals (RL; two processes x two CPU devices), or this process sending
itself the signals at chosen points (SFT, and a second SIGTERM while the checkpoint is written).
"""
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
from daca_jax.config.configure import train_config_from_dict
from daca_jax.run import pipeline, preemption
from daca_jax.run.checkpoint import Checkpointer
from daca_jax.run.cli_errors import exit_code
from daca_jax.run.metrics import MetricsWriter, read_metrics

REPO = pathlib.Path(__file__).resolve().parents[2]
# Enough iterations that the signal lands before the last one: an idle machine ran three tiny ones
# within one polling interval of _signal_after_lines.
RL_STEPS = 10
FIELDS = {"rl.steps": RL_STEPS, "checkpoint.every": 4, "task.num_eval_examples": 8, "eval.batch_size": 8,
          "sft.steps": 20, "sft.num_train_examples": 40, "log.tensorboard": False}
FLAGS = ["--config=configs/sudoku_tiny.py:smoke", "--progress=false"] + [f"--config.{k}={v}" for k, v in FIELDS.items()]
# Wall-clock and compile-time metrics differ between any two runs.
TIMING = {"rollout_s", "update_s", "rollout_tokens_per_s", "includes_compile"}
quiet = lambda *a, **k: None


def _cfg(**fields):
  c = sudoku_tiny.get_config("smoke")
  for dotted, v in {**FIELDS, **fields}.items():
    section, name = dotted.split(".")
    c[section][name] = v
  return train_config_from_dict(c)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
  """The uninterrupted run (in this process)."""
  workdir = tmp_path_factory.mktemp("straight")
  pipeline.run_main_job(_cfg(), workdir, show_progress=False, log=quiet)
  return workdir


def _final_state(workdir):
  """(step, state) of the latest RL checkpoint, as numpy arrays (whatever devices saved it)."""
  from daca_jax.models import init_model, make_logits_fn
  from daca_jax.rl.learner import GRPOLearner

  cfg = _cfg()
  graphdef, params = init_model(cfg.model, cfg.seed)
  learner = GRPOLearner(make_logits_fn(graphdef), cfg, mask_id=cfg.model.mask_token_id, eos_id=258)
  target = jax.tree.map(np.asarray, {"params": params, "opt_state": learner.init_opt_state(params)})
  ckpt = Checkpointer(workdir / "rl")
  step = ckpt.latest_step()
  state, _ = ckpt.restore(step, target)
  ckpt.close()
  return step, state


def _assert_same_run(got, want, phase_steps=RL_STEPS):
  """Metrics lines (all but timings), SFT log, evaluations and final parameters are identical."""
  a, b = read_metrics(want / "metrics.jsonl"), read_metrics(got / "metrics.jsonl")
  assert [r["step"] for r in b] == list(range(1, phase_steps + 1))
  for x, y in zip(a, b):
    assert {k: v for k, v in x.items() if k not in TIMING} == {k: v for k, v in y.items() if k not in TIMING}
  assert read_metrics(want / "sft_metrics.jsonl") == read_metrics(got / "sft_metrics.jsonl")
  res_a, res_b = (json.loads((w / "results.json").read_text()) for w in (want, got))
  for k in ("eval_before", "eval_after"):
    assert res_a[k] == res_b[k], k
  (sa, ta), (sb, tb) = _final_state(want), _final_state(got)
  assert sa == sb == phase_steps
  for x, y in zip(jax.tree.leaves(ta), jax.tree.leaves(tb), strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _signal_after_lines(procs, metrics, lines, target, timeout=600):
  """Waits until ``metrics`` holds ``lines`` lines, then sends SIGTERM twice (50 ms apart) to ``target``."""
  deadline = time.time() + timeout
  while time.time() < deadline and all(p.poll() is None for p in procs):
    if metrics.exists() and len(metrics.read_text().splitlines()) >= lines:
      target.send_signal(signal.SIGTERM)
      time.sleep(0.05)
      target.send_signal(signal.SIGTERM)
      return
    time.sleep(0.005)
  raise AssertionError(f"no {lines} metrics lines before the run ended: "
                       + " | ".join((p.communicate()[1] or "")[-1500:] for p in procs))


def _committed(directory, step):
  return (directory / str(step) / "commit_success.txt").exists()


def test_sigterm_in_rl_saves_the_current_step_and_the_same_command_resumes_exactly(straight, tmp_path):
  cmd = [sys.executable, "experiments/train.py", f"--workdir={tmp_path}"] + FLAGS
  proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  _signal_after_lines([proc], tmp_path / "metrics.jsonl", 2, proc)
  out, err = proc.communicate(timeout=300)
  assert proc.returncode == preemption.EXIT_PREEMPTED == 75, err[-3000:]
  last = err.strip().splitlines()[-1]
  step = max(r["step"] for r in read_metrics(tmp_path / "metrics.jsonl"))
  assert 2 <= step < RL_STEPS
  assert last == (f"preempted: stopped by SIGTERM after RL step {step}; its checkpoint is in {tmp_path / 'rl'}. "
                  "Run the same command to resume (exit status 75)"), last
  assert f"RL: SIGTERM received; saving the checkpoint of step {step} and stopping." in out
  assert _committed(tmp_path / "rl", step) and not (tmp_path / "results.json").exists()
  again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert again.returncode == 0, again.stderr[-3000:]
  assert f"RL: resuming from iteration {step}." in again.stdout
  _assert_same_run(tmp_path, straight)


def test_sigterm_in_sft_and_a_second_one_while_saving(straight, tmp_path, monkeypatch):
  """This process signals itself at SFT step 7 (on the loss line) and again inside the checkpoint
  save: Preempted for step 7 (exit status 75), a readable checkpoint, and a rerun equal to the
  uninterrupted run."""
  real_write, real_save = MetricsWriter.write, Checkpointer.save
  saves = []

  def write(self, step, metrics):
    real_write(self, step, metrics)
    if self.path.endswith("sft_metrics.jsonl") and step == 7:
      os.kill(os.getpid(), signal.SIGTERM)

  def save(self, step, state, metadata=None, **kw):
    if preemption.signals_received():
      os.kill(os.getpid(), signal.SIGTERM)  # a second notice while the checkpoint is written
      saves.append((step, preemption.signals_received()))
    return real_save(self, step, state, metadata, **kw)

  monkeypatch.setattr(MetricsWriter, "write", write)
  monkeypatch.setattr(Checkpointer, "save", save)
  with preemption.watching(), pytest.raises(preemption.Preempted) as stopped:
    pipeline.run_main_job(_cfg(), tmp_path, show_progress=False, log=quiet)
  assert (stopped.value.phase, stopped.value.step) == ("SFT", 7) and exit_code(stopped.value) == 75
  assert saves == [(7, 2)]
  # further notices stay ignored until the process ends (the exit status stays 75)
  assert signal.signal(signal.SIGTERM, signal.SIG_DFL) is signal.SIG_IGN
  ckpt = Checkpointer(tmp_path / "sft")
  assert ckpt.all_steps() == [7]
  ckpt.restore(7, None)  # complete and verified against its checksums
  ckpt.close()
  monkeypatch.undo()
  pipeline.run_main_job(_cfg(), tmp_path, show_progress=False, log=quiet)
  _assert_same_run(tmp_path, straight)


def test_no_watch_no_handler():
  """Outside preemption.watching() SIGTERM keeps its default action and the loops never stop."""
  assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
  assert preemption.signals_received() == 0 and not preemption.stop_requested()


@pytest.mark.slow  # three runs of 2 processes x 2 CPU devices (~3 min)
def test_sigterm_to_one_of_two_processes_stops_both_at_the_same_step(tmp_path):
  """SIGTERM reaches process 1 only (as a TPU host's maintenance notice would): both processes save the
  same step and exit 75; the rerun equals an uninterrupted two-process run. The runs sample and
  differentiate in micro-batches (rl.rollout_batch, rl.grad_accum: one row per device at a time)."""
  from tests.parallel.test_parallel import _free_port

  flags = FLAGS + ["--config.parallel.strategy=pmap", "--config.rl.rollout_batch=4", "--config.rl.grad_accum=2"]
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2",
             JAX_NUM_PROCESSES="2")

  def launch(workdir):
    port = _free_port()
    return [subprocess.Popen([sys.executable, "experiments/train.py", f"--workdir={workdir}"] + flags, cwd=REPO,
                             env=dict(env, JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_PROCESS_ID=str(i)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]

  def finish(procs, code):
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
      assert p.returncode == code, err[-3000:]
    return outs

  finish(launch(tmp_path / "straight"), 0)
  procs = launch(tmp_path / "split")
  _signal_after_lines(procs, tmp_path / "split" / "metrics.jsonl", 2, procs[1])
  outs = finish(procs, 75)
  step = max(r["step"] for r in read_metrics(tmp_path / "split" / "metrics.jsonl"))
  for _, err in outs:
    assert f"preempted: stopped by SIGTERM after RL step {step};" in err.strip().splitlines()[-1]
  assert _committed(tmp_path / "split" / "rl", step) and 2 <= step < RL_STEPS
  finish(launch(tmp_path / "split"), 0)
  _assert_same_run(tmp_path / "split", tmp_path / "straight")


_EXIT_UNDER_NOTICES = """
import atexit, os, signal, sys, time
from daca_jax.run import preemption
from daca_jax.run.cli_errors import reported_errors

def notice_during_exit():  # a further notice while the interpreter shuts down
  os.kill(os.getpid(), signal.SIGTERM)
  time.sleep(0.3)

atexit.register(notice_during_exit)
with reported_errors():
  try:
    with preemption.watching():
      os.kill(os.getpid(), signal.SIGTERM)
      time.sleep(0.05)
      assert preemption.stop_requested()
      raise preemption.Preempted("RL", 3, sys.argv[1])  # the checkpoint of step 3 is saved
  finally:
    os.kill(os.getpid(), signal.SIGTERM)  # another between the watch and the one-line report
    time.sleep(0.05)
"""


def test_further_sigterms_during_the_preemption_exit_keep_exit_status_75(tmp_path):
  """Notices after the first (between leaving the watch and the report, and during interpreter
  shutdown) neither kill the process (143) nor change its exit status."""
  run = subprocess.run([sys.executable, "-c", _EXIT_UNDER_NOTICES, str(tmp_path)], capture_output=True, text=True,
                       timeout=120, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu"))
  assert run.returncode == 75, (run.returncode, run.stderr)
  assert run.stderr.strip().splitlines()[-1].startswith("preempted: stopped by SIGTERM after RL step 3")
