"""Non-finite and out-of-range config values are refused up front, naming the field.

The fuzzing walks every field of every config section by its declared type, so a field added later is
covered without touching this file.
"""
import dataclasses
import math
import pathlib
import subprocess
import sys
import types
import typing

import pytest

from configs import sudoku_tiny
from daca_jax.run import pipeline
from daca_jax.errors import ConfigError, DataError
from daca_jax.evaluation import EvalProtocol
from daca_jax.run.pipeline import run_main_job
from daca_jax.config.configure import train_config_from_dict
from daca_jax.config.checks import INT_MAX
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig
from tests.smoke_config import set_field, smoke

REPO = pathlib.Path(__file__).resolve().parents[2]


def _sections(obj, prefix=""):
  """Every section and method sub-section: {"credit": CreditConfig, "credit.dps": DPSConfig, ...}."""
  out = {}
  for f in dataclasses.fields(obj):
    value = getattr(obj, f.name)
    if dataclasses.is_dataclass(value):
      out[prefix + f.name] = type(value)
      out.update(_sections(value, prefix + f.name + "."))
  return out


_SECTIONS = _sections(TrainConfig())


def _fields_of(kind):
  out = []
  for section, cls in _SECTIONS.items():
    hints = typing.get_type_hints(cls)
    out += [f"{section}.{f.name}" for f in dataclasses.fields(cls) if hints[f.name] is kind]
  return out


FLOAT_FIELDS = _fields_of(float)
INT_FIELDS = _fields_of(int) + ["seed"]


def _smoke_dict(dotted, value):
  d = sudoku_tiny.get_config("smoke").to_dict()  # a plain dict: the ConfigDict would coerce types
  set_field(d, dotted.split("."), value)
  return d


def test_the_fuzzing_covers_the_known_float_fields():
  # Guards against the introspection silently finding nothing (e.g. unresolved annotations).
  assert len(FLOAT_FIELDS) >= 30
  for name in ("rl.learning_rate", "rl.beta", "rl.clip_eps", "rollout.temperature", "model.norm_eps",
               "model.rope_theta", "credit.delta.gamma", "likelihood.coupled.t_max", "eval.temperature"):
    assert name in FLOAT_FIELDS
  assert "rl.group_size" in INT_FIELDS and "sft.batch_size" in INT_FIELDS


@pytest.mark.parametrize("field", FLOAT_FIELDS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1e39])  # 1e39: inf in float32
def test_every_float_field_refuses_nan_and_inf(field, value):
  with pytest.raises(ConfigError) as e:
    train_config_from_dict(_smoke_dict(field, value))
  assert e.value.field == field and "finite" in e.value.allowed


@pytest.mark.parametrize("field", INT_FIELDS)
@pytest.mark.parametrize("value", [10**20, -(10**20), INT_MAX + 1])
def test_every_int_field_refuses_values_beyond_int32(field, value):
  with pytest.raises(ConfigError) as e:
    train_config_from_dict(_smoke_dict(field, value))
  assert e.value.field == field and e.value.value == value


@pytest.mark.parametrize("field", FLOAT_FIELDS[:3] + INT_FIELDS[:3])
def test_wrong_types_are_refused(field):
  with pytest.raises(ConfigError) as e:
    train_config_from_dict(_smoke_dict(field, "1"))
  assert e.value.field == field


@pytest.mark.parametrize("field,value", [
    ("model.norm_eps", 0.0), ("model.norm_eps", -1e-5), ("model.rope_theta", 0.0),
    ("model.rope_theta", -10000.0), ("rl.adam_eps", 0.0), ("rl.group_size", 1)])
def test_values_that_break_the_math_are_refused(field, value):
  with pytest.raises(ConfigError, match=rf"{field}={value!r}"):
    train_config_from_dict(_smoke_dict(field, value))


def test_huge_int_for_a_float_field_and_task_options():
  with pytest.raises(ConfigError, match=r"rl\.learning_rate"):
    train_config_from_dict(_smoke_dict("rl.learning_rate", 10**400))
  d = _smoke_dict("task.options", {"depth": {"scale": math.nan}})
  with pytest.raises(ConfigError, match=r"task\.options\.depth\.scale=nan"):
    train_config_from_dict(d)


def test_batch_whose_tokens_overflow_int32_is_refused():
  d = _smoke_dict("rl.group_size", 2**30)
  with pytest.raises(ConfigError, match=r"rl\.prompts_per_step \* rl\.group_size"):
    train_config_from_dict(d)


def test_sections_validated_alone_and_eval_flags_are_checked_too():
  with pytest.raises(ConfigError, match=r"rollout\.temperature=nan"):
    RolloutConfig(temperature=math.nan).validate()
  with pytest.raises(ConfigError, match=r"--temperature=inf"):
    EvalProtocol(gen_lengths=(32,), temperature=math.inf).validate()
  with pytest.raises(ConfigError, match=r"--seed=100000000000000000000"):
    EvalProtocol(gen_lengths=(32,), seed=10**20).validate()


def test_cli_refuses_nan_in_one_line_and_writes_nothing(tmp_path):
  workdir = tmp_path / "run"
  proc = subprocess.run(
      [sys.executable, "experiments/train.py", "--config=configs/sudoku_tiny.py:smoke", f"--workdir={workdir}",
       "--config.rl.learning_rate=nan"], cwd=REPO, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1] == (
      "error: rl.learning_rate=nan is not allowed: expected a finite number (of magnitude <= 3.403e+38, "
      "float32's largest)")
  assert "Traceback" not in proc.stderr and not workdir.exists()


def test_batch_that_does_not_split_over_the_mesh_is_refused_before_any_work(tmp_path, monkeypatch):
  # A 4-device data-parallel mesh (stand-in: the checks read only the axis sizes): the RL batch
  # prompts_per_step * group_size = 2 * 3 = 6 does not split. Refused before SFT and before the
  # workdir exists, so a corrected rerun in the same workdir is not locked to the bad value.
  monkeypatch.setattr(pipeline.parallel, "make_mesh",
                      lambda cfg: types.SimpleNamespace(shape={"data": 4, "fsdp": 1, "tensor": 1}))
  workdir = tmp_path / "run"
  with pytest.raises(ConfigError, match=r"rl\.prompts_per_step \* rl\.group_size=6.*multiple of the 4"):
    run_main_job(smoke(rl__group_size=3, parallel__strategy="pmap"), workdir, show_progress=False,
                 log=lambda *a: None)
  assert not workdir.exists()


@pytest.mark.parametrize("fields,error,pattern", [
    ({"rl__prompts_per_step": 500}, ConfigError, r"rl\.prompts_per_step=500"),
    ({"task__eval_path": "BAD_CSV"}, DataError, r"bad\.csv:2"),
])
def test_refused_run_leaves_no_workdir(tmp_path, fields, error, pattern):
  if fields.get("task__eval_path") == "BAD_CSV":
    bad = tmp_path / "bad.csv"
    bad.write_text("Puzzle,Solution\n12ab,1234\n")
    fields = {"task__eval_path": str(bad)}
  workdir = tmp_path / "a" / "run"
  with pytest.raises(error, match=pattern):
    run_main_job(smoke(**fields), workdir, show_progress=False, log=lambda *a: None)
  assert not (tmp_path / "a").exists()
