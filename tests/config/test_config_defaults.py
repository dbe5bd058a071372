"""configs/base.py and the config dataclasses of daca_jax.config agree field by field.

A default written in two places drifts: a user of the library (dataclasses) and a user of the main job
(configs/base.py) would then run different methods under the same name. These tests make every field's
default one fact, checked both ways, and its description a comment on its one line in base.py.
"""
import dataclasses
import inspect
import re

import jax
import jax.numpy as jnp
import pytest

from configs import base
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.config.train import TrainConfig

def _dataclass_defaults(obj, prefix=""):
  out = {}
  for f in dataclasses.fields(obj):
    value = getattr(obj, f.name)
    if dataclasses.is_dataclass(value):
      out.update(_dataclass_defaults(value, f"{prefix}{f.name}."))
    else:
      out[f"{prefix}{f.name}"] = value
  return out


def _config_values(d, prefix=""):
  out = {}
  for k, v in d.items():
    if isinstance(v, dict) and k != "options":  # task.options: free-form constructor arguments
      out.update(_config_values(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def test_every_field_has_the_same_default_in_base_py_and_the_dataclasses():
  lib = _dataclass_defaults(TrainConfig())
  cfg = _config_values(base.get_config().to_dict())
  assert len(lib) > 90  # the introspection found the sections
  assert sorted(set(lib) - set(cfg)) == [], "fields missing from configs/base.py"
  assert sorted(set(cfg) - set(lib)) == [], "fields of configs/base.py the dataclasses do not have"
  differ = {k: (lib[k], cfg[k]) for k in lib
            if not (lib[k] == cfg[k] or (isinstance(lib[k], (tuple, dict)) and type(lib[k])(cfg[k]) == lib[k]))}
  assert differ == {}, "(dataclass default, configs/base.py value)"


def test_every_base_py_field_is_described_on_its_line():
  assigned, previous = {}, ""
  for line in inspect.getsource(base.get_config).splitlines():
    m = re.match(r"\s*c\.([\w.]+) = (.*)$", line)
    if m and not (m.group(1) != "task.options" and m.group(2).startswith("ml_collections.ConfigDict()")):
      comment = m.group(2).split("#", 1)[1].strip() if "#" in m.group(2) else ""
      assigned[m.group(1)] = comment or previous.strip().lstrip("#").strip()  # or the line above
    previous = line if line.strip().startswith("#") else ""
  assert set(assigned) == set(_dataclass_defaults(TrainConfig())) | {"task.options"}
  assert [k for k, described in assigned.items() if not described] == []


def test_the_library_does_not_mask_the_prompt_unless_asked():
  # d1 masks 15% of prompt tokens in its likelihood passes; a user of LikelihoodConfig() who did not ask
  # for it must get the prompt scored as given.
  from daca_jax.likelihood.common import mask_prompt

  prompt = jnp.arange(1, 201, dtype=jnp.int32).reshape(2, 100)
  key = jax.random.PRNGKey(0)
  assert LikelihoodConfig().p_mask_prompt == 0.0
  assert bool(jnp.all(mask_prompt(key, prompt, LikelihoodConfig().p_mask_prompt, 0) == prompt))
  d1 = mask_prompt(key, prompt, 0.15, 0)
  assert 0 < int(jnp.sum(d1 == 0)) < 100  # the d1 setting does mask (the check above could fail)


@pytest.mark.parametrize("task", ["sudoku_tiny", "countdown_tiny", "json_schema_tiny"])
def test_task_configs_only_set_fields_base_py_defines(task):
  import importlib

  mod = importlib.import_module(f"configs.{task}")
  cfg = _config_values(mod.get_config().to_dict())
  assert set(cfg) == set(_config_values(base.get_config().to_dict()))
