"""A bad --config flag is one line naming what is wrong, with exit 2 and no workdir: the config file's own
error (a paper preset that does not parse, an unknown preset), an unknown field with ml_collections'
suggestion and the flag that named it, a value of the wrong type with its flag. absl and ml_collections
wrap these (a ConfigError re-raised from its message alone even failed with a TypeError)."""
import os
import pathlib
import subprocess
import sys

import pytest

from daca_jax.errors import ConfigError
from daca_jax.run.cli_errors import flag_error

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args,line", [
    (["--config=configs/paper.py:d1_sudoku4x4_daca,smoke"],
     "error: configs/paper.py preset='d1_sudoku4x4_daca,smoke' is not allowed: expected <base>_<task>[_<arm>][,smoke]"),
    (["--config=configs/sudoku_tiny.py", "--config.rl.credt=dps"],
     "error: unknown config field 'credt' in --config.rl.credt; Did you mean \"credit\" instead of \"credt\"?"),
    (["--config=configs/sudoku_tiny.py:defalt"],
     "error: flag --config=configs/sudoku_tiny.py:defalt: configs/sudoku_tiny.py: unknown preset 'defalt'"),
])
def test_train_py_reports_a_bad_config_flag_in_one_line(tmp_path, args, line):
  env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "experiments/train.py", *args, f"--workdir={tmp_path / 'w'}"], cwd=REPO,
                        env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1].startswith(line), proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr and not (tmp_path / "w").exists()


def test_flag_error_reads_the_original_exception_of_a_wrapped_chain():
  try:
    try:
      raise ConfigError("configs/x.py preset", "bad", "one of ['a']")
    except ConfigError as inner:
      try:  # ml_collections re-raises type(e)(message), which a ConfigError cannot take
        raise type(inner)("Error whilst parsing config file:\n\nTraceback ...")
      except TypeError as middle:
        raise ValueError("flag --config=configs/x.py:bad: ConfigError.__init__() missing ...") from middle
  except ValueError as outer:
    assert flag_error(outer, []) == "configs/x.py preset='bad' is not allowed: expected one of ['a']"
  plain = ValueError("flag --seed=x: not an int")
  assert flag_error(plain, []) == "flag --seed=x: not an int"
