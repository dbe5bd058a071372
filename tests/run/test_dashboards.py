"""Dashboards and run comparison on two tiny real runs: TensorBoard events (read back with tensorboard's
own reader) carry the metrics.jsonl scalars, compare.py tables and plots the runs, and the console
says what each phase is doing."""
import dataclasses
import json
import subprocess
import sys
import types

import numpy as np
import pytest

from daca_jax.reports.compare import compare, discover, group
from daca_jax.run.dashboards import Dashboard
from daca_jax.errors import ConfigError, DataError
from daca_jax.run.metrics import read_metrics
from daca_jax.run.pipeline import run_main_job
from daca_jax.config.train import LogConfig
from tests.smoke_config import smoke

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def _cfg(seed):
  cfg = smoke(sft__steps=4, rl__steps=2, task__num_eval_examples=8, eval__batch_size=8, checkpoint__sft_every=4,
              log__trajectory_every=2)
  return dataclasses.replace(cfg, seed=seed).validate()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """One tiny real run (the smoke preset with fewer steps) and its console log."""
  root = tmp_path_factory.mktemp("runs")
  log = []
  run_main_job(_cfg(0), root / "a_s0", show_progress=False, log=log.append)
  return root, {"a_s0": log}


def _events(path):
  acc = event_accumulator.EventAccumulator(str(path), size_guidance={"scalars": 0, "images": 0})
  acc.Reload()
  return acc


def _scalars(acc):
  return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_events_hold_the_metrics_jsonl_scalars(runs):
  wd = runs[0] / "a_s0"
  for phase, jsonl in (("sft", wd / "sft_metrics.jsonl"), ("rl", wd / "metrics.jsonl")):
    records = read_metrics(jsonl)
    expected = {}
    for r in records:
      for k, v in r.items():
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
          expected.setdefault(k, []).append((r["step"], float(np.float32(v))))
    got = _scalars(_events(wd / "tb" / phase))
    assert got == expected, phase
  before = json.loads((wd / "eval_before.json").read_text())["metrics"]
  after = json.loads((wd / "eval_after.json").read_text())["metrics"]
  got = _scalars(_events(wd / "tb" / "eval"))
  assert got == {k: [(0, float(np.float32(before[k]))), (2, float(np.float32(after[k])))] for k in before}
  images = _events(wd / "tb" / "rl").Images("trajectory")
  assert [i.step for i in images] == [2] and images[0].width > 300


def test_console_says_what_each_phase_is_doing(runs):
  log = runs[1]["a_s0"]
  assert "plumbing check" in log[0] and "expected to be near zero" in log[0]
  for phase in ("SFT: compiling the SFT step", "RL diffu_grpo: compiling the rollout and the update"):
    i = next(i for i, line in enumerate(log) if line.startswith(phase))
    assert log[i + 1].startswith(phase.split(":")[0] + ": first step done in ")
  assert any(line.startswith("eval (before RL): decoding the first of 1 batches") for line in log)
  assert any("plumbing check: near-zero metrics" in line for line in log)
  assert any(line == f"Dashboards: tensorboard --logdir {runs[0] / 'a_s0'}" for line in log)


def _final_rows(table):
  return {line.split()[0]: line.split() for line in table.splitlines() if line.startswith("test/")}


def test_compare_two_runs(runs, tmp_path):
  """The real run against a copy whose test results after RL were shifted by a known amount."""
  import shutil
  root = runs[0]
  shutil.copytree(root / "a_s0", tmp_path / "b_s0")
  res = json.loads((tmp_path / "b_s0" / "results.json").read_text())
  res["eval_after"] = {k: v + 0.125 for k, v in res["eval_after"].items()}
  (tmp_path / "b_s0" / "results.json").write_text(json.dumps(res))
  out = tmp_path / "cmp.png"
  rows = _final_rows(compare([root / "a_s0", tmp_path / "b_s0"], out))
  a = json.loads((root / "a_s0" / "results.json").read_text())["eval_after"]
  for k in ("strict_solved", "cell_accuracy"):
    assert rows[f"test/{k}"][1:4] == [f"{a[k]:.4f}", f"{a[k] + 0.125:.4f}", "+0.1250"]
  assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


@pytest.mark.slow
def test_compare_cli_on_two_seeds(runs, tmp_path):
  root = runs[0]
  run_main_job(_cfg(1), root / "b_s1", show_progress=False, log=lambda *_: None)
  out = tmp_path / "cmp.png"
  proc = subprocess.run([sys.executable, "experiments/compare.py", str(root / "a_s0"), str(root / "b_s1"),
                         f"--output={out}"], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  rows = _final_rows(proc.stdout)
  a, b = (json.loads((root / n / "results.json").read_text())["eval_after"] for n in ("a_s0", "b_s1"))
  for k in ("strict_solved", "cell_accuracy"):  # different seeds: the difference of the two runs
    assert rows[f"test/{k}"][1:4] == [f"{a[k]:.4f}", f"{b[k]:.4f}", f"{b[k] - a[k]:+.4f}"]
  assert out.stat().st_size > 10_000


def _fake_run(path, seed, rewards, after, rl_steps=3):
  path.mkdir(parents=True)
  (path / "metrics.jsonl").write_text("".join(json.dumps({"step": i + 1, "reward_mean": r, "kl": 0.1 * r})
                                              + "\n" for i, r in enumerate(rewards)))
  (path / "results.json").write_text(json.dumps({
      "eval_before": {"strict_solved": 0.1, "num_examples": 8}, "eval_after": {"strict_solved": after,
                                                                              "num_examples": 8},
      "config": {"task": {"name": "sudoku4x4"}, "rl": {"steps": rl_steps}, "seed": seed}}))


@pytest.mark.parametrize("results, message", [
    ([1], "expected a JSON dict, found list"),
    ({"config": 5, "eval_before": {}, "eval_after": {}}, "no config.task.name"),
    ({"config": {"task": {"name": "sudoku4x4"}, "rl": {"steps": "3"}}}, "config.rl.steps='3' is not an integer"),
    ({"config": {"task": {"name": "sudoku4x4"}, "rl": {"steps": 3}}, "eval_before": {"a": 0.1}, "eval_after": [1]},
     r"eval_after=\[1\] is not an object of metric names to numbers"),
    ({"config": {"task": {"name": "sudoku4x4"}, "rl": {"steps": 3}}, "eval_before": {"a": "x"}, "eval_after": {}},
     "eval_before=.* is not an object"),
])
def test_a_results_file_of_the_wrong_shape_is_named(tmp_path, results, message):
  # Valid JSON of another shape was a KeyError traceback, or a run silently shown without its results.
  _fake_run(tmp_path / "a_s0", 0, [0.1], 0.2)
  (tmp_path / "a_s0" / "results.json").write_text(json.dumps(results))
  with pytest.raises(DataError, match=f"a_s0/results.json.*{message}"):
    discover([tmp_path / "a_s0"])


def test_seeds_form_bands_and_differences_are_paired_by_seed(tmp_path):
  grid = tmp_path / "grid" / "cells" / "sudoku4x4" / "diffu_grpo"
  _fake_run(grid / "base" / "seed0", 0, [0.1, 0.2, 0.3], 0.20)
  _fake_run(grid / "base" / "seed1", 1, [0.3, 0.2, 0.1], 0.40)
  _fake_run(grid / "plus_DPS" / "seed0", 0, [0.2, 0.2, 0.2], 0.25)
  _fake_run(grid / "plus_DPS" / "seed1", 1, [0.4, 0.4, 0.4], 0.52)
  groups = group(discover([tmp_path / "grid"]))
  assert list(groups) == ["sudoku4x4/diffu_grpo/base", "sudoku4x4/diffu_grpo/+DPS"]
  assert [r.seed for r in groups["sudoku4x4/diffu_grpo/base"]] == [0, 1]
  from daca_jax.reports.compare import band
  steps, mean, lo, hi = band(groups["sudoku4x4/diffu_grpo/base"], "reward_mean")
  np.testing.assert_allclose(mean, [0.2, 0.2, 0.2])
  np.testing.assert_allclose(lo, [0.1, 0.2, 0.1])
  np.testing.assert_allclose(hi, [0.3, 0.2, 0.3])
  table = compare([tmp_path / "grid"], tmp_path / "g.png")
  row = next(line for line in table.splitlines() if line.startswith("test/strict_solved"))
  # paired differences 0.05 and 0.12: mean 0.085, 95% CI 12.706 * std(ddof=1) / sqrt(2) = 0.4447
  assert "+0.0850 ± 0.4447 (paired, n=2)" in row and "0.3000 ± 1.2706 (n=2)" in row
  assert (tmp_path / "g.png").stat().st_size > 10_000


def test_resumed_events_drop_the_points_after_the_checkpoint(tmp_path):
  cfg = LogConfig()
  with Dashboard(tmp_path, cfg) as d:
    sink = d.sink("rl")
    for step in (1, 2, 3, 4):
      sink(step, {"step": step, "loss": float(step), "note": "text is not a scalar", "ok": True})
  with Dashboard(tmp_path, cfg) as d:  # resumed from the checkpoint of step 2: 3 and 4 are redone
    sink = d.sink("rl", resume_after=2)
    for step in (3, 4):
      sink(step, {"step": step, "loss": 10.0 * step})
  assert _scalars(_events(tmp_path / "tb" / "rl")) == {"loss": [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]}


def test_wandb_is_refused_before_any_work_when_missing_and_used_when_present(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "wandb", None)  # not installed (find_spec gives None)
  cfg = smoke(log__wandb="my-project")
  with pytest.raises(ConfigError, match=r"log\.wandb='my-project'.*pip install wandb"):
    run_main_job(cfg, tmp_path / "w", show_progress=False, log=lambda *_: None)
  assert not (tmp_path / "w").exists()
  logged = []
  run = types.SimpleNamespace(log=logged.append, define_metric=lambda *a, **k: None, finish=lambda: None)
  fake = types.ModuleType("wandb")
  fake.__spec__ = types.SimpleNamespace(name="wandb")
  fake.init = lambda **kw: logged.append(("init", kw["project"])) or run
  fake.Image = lambda rgb: ("image", rgb.shape)
  monkeypatch.setitem(sys.modules, "wandb", fake)
  with Dashboard(tmp_path, LogConfig(tensorboard=False, wandb="my-project")) as d:
    sink = d.sink("sft")
    sink(5, {"step": 5, "loss": 0.5})
    sink.image("trajectory", 5, np.zeros((4, 4, 3), np.uint8))
  assert logged == [("init", "my-project"), {"sft/loss": 0.5, "sft/step": 5},
                    {"sft/trajectory": ("image", (4, 4, 3)), "sft/step": 5}]


def test_tensorboard_writer_is_imported_without_torch_and_torch_still_imports_after():
  # tensorboardX's writer tries `import torch` at import time (~5 s per process with the [hf] extra);
  # the dashboard hides torch for that one import only.
  code = ("import importlib.util, sys, tempfile\n"
          "from daca_jax.run.dashboards import _summary_writer_class\n"
          "W = _summary_writer_class()\n"
          "assert 'torch' not in sys.modules, 'torch was imported (or its None entry left behind)'\n"
          "w = W(tempfile.mkdtemp()); w.add_scalar('rl/loss', 0.5, 1); w.close()\n"
          "if importlib.util.find_spec('torch') is not None:\n"
          "  import torch; assert torch.zeros(2).sum().item() == 0.0\n"
          "print('ok')\n")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
