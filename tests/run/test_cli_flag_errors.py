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


@pytest.mark.parametrize("body,allowed", [
    (None, "an existing Python file (configs/*.py[:preset]);"),
    ("raise RuntimeError('boom')\n", "a file that runs: it raised RuntimeError: boom at "),
    ("def get_config(\n", "a Python file that parses: SyntaxError: "),
    ("X = 1\n", "a file defining get_config() (as configs/*.py do); it defines no get_config"),
])
def test_a_config_file_that_is_missing_or_does_not_run_is_one_line(tmp_path, body, allowed):
  """A missing --config file was a confusing line with exit 1; one that raised or did not parse was a
  traceback; one without get_config() read as an 'unknown config field'."""
  cfg = tmp_path / "my_config.py"
  if body is not None:
    cfg.write_text(body)
  env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "experiments/train.py", f"--config={cfg}", f"--workdir={tmp_path / 'w'}"],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1].startswith(f"error: --config={str(cfg)!r} is not allowed: expected "
                                                         + allowed), proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr and not (tmp_path / "w").exists()


def test_a_get_config_that_returns_no_mapping_is_a_config_error():
  from daca_jax.config.configure import train_config_from_dict
  with pytest.raises(ConfigError, match=r"config=3 is not allowed: expected a mapping of config sections"):
    train_config_from_dict(3)


def test_every_seed_flag_takes_the_range_train_configs_take():
  """A seed train.py refuses (TrainConfig.seed: [0, INT_MAX]) is refused by every script's ``--seed``."""
  from daca_jax.config.checks import INT_MAX
  from daca_jax.run.cli_errors import SEED_BOUNDS
  assert SEED_BOUNDS == {"lower_bound": 0, "upper_bound": INT_MAX}
  scripts = [p for p in sorted((REPO / "experiments").glob("*.py")) if 'DEFINE_integer("seed"' in p.read_text()]
  assert len(scripts) >= 4, scripts
  for p in scripts:
    line = next(l for l in p.read_text().splitlines() if 'DEFINE_integer("seed"' in l)
    assert "**cli_errors.SEED_BOUNDS" in line, (p.name, line)


@pytest.mark.parametrize("seed", ["-1", str(2**31)])
def test_evaluate_py_refuses_a_seed_out_of_range_before_any_work(tmp_path, seed):
  env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "experiments/evaluate.py", f"--seed={seed}", "--workdir=nowhere",
                         f"--output_dir={tmp_path / 'out'}"], cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1] == (
      f"error: flag --seed={seed}: {seed} is not an integer in the range [0, 2147483647]"), proc.stderr[-2000:]
  assert not (tmp_path / "out").exists()
