"""Bad configs give one clear error naming the field, the value and what is allowed."""
import subprocess
import sys
import pathlib

import pytest

from configs import sudoku_tiny
from daca_jax.errors import ConfigError
from daca_jax.run.task_views import build_task
from daca_jax.config.configure import train_config_from_dict
from tests.smoke_config import set_field

REPO = pathlib.Path(__file__).resolve().parents[2]


def _cfg(**overrides):
  c = sudoku_tiny.get_config("default")
  for dotted, v in overrides.items():
    set_field(c, dotted.split("__"), v)
  return c


def test_default_and_smoke_configs_validate():
  for preset in ("default", "smoke"):
    cfg = train_config_from_dict(sudoku_tiny.get_config(preset))
    # the main job: SML alone (uniform credit; configs/sudoku_tiny.py says why), the library's default DPS elsewhere
    assert cfg.rl.credit == "uniform" and cfg.rl.likelihood == "stratified" and cfg.likelihood.stratified.num_strata == 4
  from configs import base
  assert train_config_from_dict(base.get_config()).rl.credit == "dps"


@pytest.mark.parametrize("field,value,pattern", [
    ("rl__credit", "dpss", r"rl\.credit='dpss'.*\['contrast', 'delta', 'dps', 'dtca', 'position_value', 'token_reward', 'uniform'\]"),
    ("rl__likelihood", "meanfield", r"rl\.likelihood='meanfield'.*mean_field.*stratified"),
    ("rl__objective", "ppo", r"rl\.objective='ppo'.*diffu_grpo"),
    ("rollout__remasking", "topk", r"rollout\.remasking='topk'.*low_confidence"),
    ("task__name", "chess", r"task\.name='chess'.*sudoku4x4"),
    ("likelihood__stratified__num_strata", 21, r"likelihood\.stratified\.num_strata=21.*gen_length=20"),
    ("rollout__steps", 7, r"rollout\.steps=7.*multiple of the number of blocks"),
    ("rollout__block_length", 6, r"rollout\.block_length=6.*divisor of rollout\.gen_length=20"),
    ("likelihood__stratified__partition", "zigzag", r"likelihood\.stratified\.partition='zigzag'"),
    ("credit__dps__scope", "global", r"credit\.dps\.scope='global'"),
    ("credit__dtca__tagger", "nltk", r"credit\.dtca\.tagger='nltk'.*rule"),
    ("rl__group_size", 1, r"rl\.group_size=1"),
    ("model__n_heads", 3, r"model\.n_heads=3"),
])
def test_bad_values_name_the_field(field, value, pattern):
  if field == "rollout__steps":
    overrides = {"rollout__block_length": 10, field: value}
  else:
    overrides = {field: value}
  with pytest.raises(ConfigError, match=pattern):
    train_config_from_dict(_cfg(**overrides))


def test_a_field_that_moved_into_its_method_section_says_where_it_is():
  c = _cfg()
  c.credit.alpha = 1.0  # the pre-sections name of credit.dps.alpha
  with pytest.raises(ConfigError, match=r"credit\.alpha=1\.0 .*credit\.alpha is now credit\.dps\.alpha"):
    train_config_from_dict(c)
  with pytest.raises(ConfigError, match=r"likelihood\.stratified=4 .*likelihood\.stratified\.<field>"):
    train_config_from_dict({"likelihood": {"stratified": 4}})  # a section given a value


def test_steps_divisible_by_blocks_ok():
  cfg = train_config_from_dict(_cfg(rollout__block_length=5, rollout__steps=8))
  assert cfg.rollout.steps_per_block == 2


def test_gen_length_too_short_for_task():
  cfg = train_config_from_dict(_cfg(rollout__gen_length=12, rollout__block_length=12, rollout__steps=6,
                                    likelihood__stratified__num_strata=4))
  with pytest.raises(ConfigError, match=r"rollout\.gen_length=12.*>= 17"):
    build_task(cfg)


def test_missing_explicit_paths(tmp_path):
  cfg = train_config_from_dict(_cfg(task__eval_path=str(tmp_path / "nope.csv")))
  with pytest.raises(FileNotFoundError, match=r"task\.eval_path"):
    build_task(cfg)
  cfg = train_config_from_dict(_cfg(data__data_dir=str(tmp_path / "nodir")))
  with pytest.raises(FileNotFoundError, match=r"data\.data_dir"):
    build_task(cfg)


def test_cli_reports_one_clear_line(tmp_path):
  proc = subprocess.run(
      [sys.executable, "experiments/train.py", "--config=configs/sudoku_tiny.py:smoke",
       f"--workdir={tmp_path}", "--config.rl.credit=nope"],
      cwd=REPO, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  assert "error: rl.credit='nope' is not allowed" in proc.stderr
  assert "Traceback" not in proc.stderr


def test_negative_seed():
  c = sudoku_tiny.get_config("smoke")
  c.seed = -1
  with pytest.raises(ConfigError, match=r"seed=-1"):
    train_config_from_dict(c)


def test_rollout_validates_geometry_when_called_directly():
  import jax
  import jax.numpy as jnp
  from daca_jax.diffusion import rollout
  from daca_jax.config.rollout import RolloutConfig
  with pytest.raises(ConfigError, match=r"rollout\.block_length=8"):
    rollout(lambda p, x: jnp.zeros(x.shape + (5,)), None, jnp.zeros((1, 2), jnp.int32), jax.random.PRNGKey(0),
            RolloutConfig(gen_length=20, block_length=8, steps=4), mask_id=4, eos_id=3)


def test_trajectory_steps_must_match_rollout():
  c = sudoku_tiny.get_config("default")
  c.likelihood.trajectory_steps = 3
  with pytest.raises(ConfigError, match=r"likelihood\.trajectory_steps=3.*rollout\.steps=10"):
    train_config_from_dict(c)


def test_a_saved_config_of_the_flat_layout_reads_as_the_same_config():
  # A run's config.json written before the fields moved into their method's section: resuming or
  # evaluating that run reads it as the config it was (configure.upgrade_config_dict).
  from daca_jax.config.configure import MOVED_FIELDS, upgrade_config_dict

  new = train_config_from_dict(_cfg(credit__dps__alpha=0.7, likelihood__stratified__partition="commit_order",
                                    likelihood__trajectory__groups=2, credit__dtca__top_frac=0.5))
  flat = new.to_dict()
  for old, moved in MOVED_FIELDS.items():  # write every moved field back at its old place
    section, name = old.split(".")
    node = flat
    *parents, leaf = moved.split(".")
    for part in parents:
      node = node[part]
    flat[section][name] = node.pop(leaf)
  for section in ("credit", "likelihood"):  # emptied sub-sections disappear, as in an old file
    for k in [k for k, v in flat[section].items() if v == {}]:
      del flat[section][k]
  assert "alpha" in flat["credit"] and "dps" not in flat["credit"]
  with pytest.raises(ConfigError, match=r"credit\.alpha is now credit\.dps\.alpha"):
    train_config_from_dict(flat)
  assert train_config_from_dict(upgrade_config_dict(flat)) == new
