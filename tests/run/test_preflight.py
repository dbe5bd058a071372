"""experiments/train.py --compile_only --target: a preflight of the main job compiles its programs, and the
run on the same workdir loads them instead of compiling and ends where a run without them ends."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMOKE = ["--config=configs/sudoku_tiny.py:smoke", "--progress=false"]


def _run(args, timeout=600):
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("XLA_FLAGS", None)
  return subprocess.run([sys.executable, "experiments/train.py", *SMOKE, *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=timeout)


def test_a_preflight_is_one_line_and_refuses_what_the_run_would_not_do(tmp_path):
  r = _run([f"--workdir={tmp_path / 'a'}", "--compile_only"])
  assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith(
      "error: --target=None is not allowed: expected given together: --compile_only --target=<machine>")
  # the run's own layout must span the target's devices: 'none' is one device
  r = _run([f"--workdir={tmp_path / 'b'}", "--compile_only", "--target=cpu:2"])
  assert r.returncode == 2 and "parallel.strategy='none' is not allowed" in r.stderr.strip().splitlines()[-1]
  assert not (tmp_path / "b").exists()  # refused before anything is written
  # a workdir a live run holds (daca_jax.run.lease): its executables are not written under it
  held = tmp_path / "held"
  held.mkdir()
  from daca_jax.run.lease import WorkdirLease
  with WorkdirLease(held):
    r = _run([f"--workdir={held}", "--compile_only", "--target=cpu:1"])
  assert r.returncode == 2 and f"pid {os.getpid()}" in r.stderr.strip().splitlines()[-1], r.stderr[-2000:]
  assert sorted(p.name for p in held.iterdir()) == []


@pytest.mark.slow
def test_the_run_loads_its_preflights_executables_and_ends_as_a_run_without_them(tmp_path):
  r = _run([f"--workdir={tmp_path / 'pre'}", "--compile_only", "--target=cpu:1"])
  assert r.returncode == 0, r.stderr[-3000:]
  assert r.stdout.strip().splitlines()[-1].startswith("fits cpu:1 (XLA:CPU, 1 x cpu)")
  r = _run([f"--workdir={tmp_path / 'pre'}"])
  assert r.returncode == 0, r.stderr[-3000:]
  assert "rollout: running the executable compiled ahead of time (no compile)" in r.stdout
  assert "update: running the executable compiled ahead of time (no compile)" in r.stdout
  r = _run([f"--workdir={tmp_path / 'plain'}"])
  assert r.returncode == 0, r.stderr[-3000:]
  # a preflight of another run into this workdir is refused as that run would be, and changes nothing
  before = sorted(p.name for p in (tmp_path / "plain").iterdir())
  r = _run([f"--workdir={tmp_path / 'plain'}", "--compile_only", "--target=cpu:1", "--config.rl.learning_rate=0.5"])
  assert r.returncode == 2 and "as in the run already in --workdir" in r.stderr.strip().splitlines()[-1]
  assert sorted(p.name for p in (tmp_path / "plain").iterdir()) == before
  got, want = (json.loads((tmp_path / w / "results.json").read_text()) for w in ("pre", "plain"))
  assert got["eval_after"] == want["eval_after"] and got["eval_before"] == want["eval_before"]
  metrics = [(tmp_path / w / "metrics.jsonl").read_text().splitlines() for w in ("pre", "plain")]
  drop = lambda line: {k: v for k, v in json.loads(line).items() if not k.endswith("_s") and "time" not in k}
  assert [drop(x) for x in metrics[0]] == [drop(x) for x in metrics[1]]
