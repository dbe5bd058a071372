"""``--help`` of every experiments/*.py script prints its flags (train.py said "Unknown command line flag
'help'" and exited 2); train.py's also lists the config files and their presets."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.name for p in (ROOT / "experiments").glob("*.py"))


def _help(script: str) -> subprocess.CompletedProcess:
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  return subprocess.run([sys.executable, f"experiments/{script}", "--help"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300)


def test_train_help_lists_flags_and_config_presets():
  proc = _help("train.py")
  assert proc.returncode in (0, 1), proc.stderr[-2000:]  # absl exits 1 after printing help
  out = proc.stdout
  assert "Unknown command line flag" not in proc.stderr
  for text in ("--config", "--workdir", "--[no]progress", "configs/sudoku_tiny.py: default, smoke",
               "configs/countdown_tiny.py: default, smoke", "configs/base.py: (no presets: the defaults)"):
    assert text in out, text


@pytest.mark.slow
@pytest.mark.parametrize("script", [s for s in SCRIPTS if s != "train.py"])
def test_every_script_prints_its_flags(script):
  proc = _help(script)
  assert proc.returncode in (0, 1) and "flags:" in proc.stdout, (proc.stdout + proc.stderr)[-2000:]
