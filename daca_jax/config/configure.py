"""The whole job's configuration: a :class:`~daca_jax.config.train.TrainConfig` built from a ConfigDict and
checked in full, including every name a registry resolves.

The sections (the other modules of :mod:`daca_jax.config`) sit below the packages that own the
registries (diffusion, credit, likelihood, rl, tasks all import them), so their ``validate`` methods
check values and shapes only; the names (``rl.objective``, ``rl.credit``, ``rl.likelihood``, ``rl.advantage``, ``rollout.remasking``,
``credit.dtca.tagger``, ``task.name``) are checked here, above those packages, before any work starts.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping, Sequence

from daca_jax.credit import CREDIT, TAGGERS
from daca_jax.diffusion.remasking import REMASKING
from daca_jax.errors import ConfigError
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.registry import Registry
from daca_jax.rl.advantages import ADVANTAGES
from daca_jax.rl.methods import METHODS, OBJECTIVES, check_token_credit
from daca_jax.rl.pass_accum import check_pass_accum
from daca_jax.tasks import TASKS
from daca_jax.tasks.training_rewards import check_reward
from daca_jax.config.train import TrainConfig

# (section, field, registry): each named field of a TrainConfig and the registry that resolves it.
NAMED_FIELDS: tuple[tuple[str, str, Registry[Any]], ...] = (
    ("rollout", "remasking", REMASKING), ("credit.dtca", "tagger", TAGGERS), ("rl", "objective", OBJECTIVES),
    ("rl", "credit", CREDIT), ("rl", "likelihood", LIKELIHOOD), ("rl", "advantage", ADVANTAGES),
    ("task", "name", TASKS))
# Fields where "" means "the default of another field" rather than a name.
_EMPTY_ALLOWED = frozenset({("rl", "advantage")})


def check_names(cfg: TrainConfig) -> TrainConfig:
  """Checks every registry-resolved field of ``cfg``.

  Raises:
    ConfigError: a name that is not registered; the message names the field, the value and the
      registered names.
  """
  for section, name, registry in NAMED_FIELDS:
    owner = cfg
    for part in section.split("."):
      owner = getattr(owner, part)
    value = getattr(owner, name)
    if value == "" and (section, name) in _EMPTY_ALLOWED:
      continue
    registry.get(value)  # its error names registry.field, which is f"{section}.{name}"
  check_reward(cfg.task.reward, cfg.task.name)  # keyed by (reward, task): a task d1 has no reward for
  check_train_prompt_style(cfg.task.train_prompt_style, cfg.task.name)
  return cfg


def check_train_prompt_style(style: str, task_name: str) -> None:
  """Checks ``task.train_prompt_style=style``: "" or a prompt style task ``task_name`` offers.

  Raises:
    ConfigError: naming ``task.train_prompt_style`` and the task's styles (or saying it has none).
  """
  if style == "":
    return
  cls = TASKS.get(task_name)
  styles = tuple(getattr(cls, "prompt_styles", ())) if "prompt_style" in cls.OPTIONS else ()
  if style not in styles:
    raise ConfigError("task.train_prompt_style", style,
                      f"'' (train on the evaluation prompts) or one of {list(styles)}, the prompt styles of "
                      f"task {task_name!r}" if styles else f"'' for task {task_name!r}: it has one fixed "
                      "prompt format")


def validate(cfg: TrainConfig) -> TrainConfig:
  """``cfg.validate()`` (values, cross-section checks), :func:`check_names` and
  :func:`check_combinations`; returns ``cfg``.

  Raises:
    ConfigError: the first field that is not allowed.
  """
  return check_combinations(check_names(cfg.validate()))


def check_combinations(cfg: TrainConfig) -> TrainConfig:
  """Refuses combinations of registered pieces that are not meaningful, each with its reason: per-token
  advantages under a method whose loss is per sequence (:func:`~daca_jax.rl.methods.check_token_credit`),
  per-pass accumulation's (:func:`~daca_jax.rl.pass_accum.check_pass_accum`) and every method's own
  check (``Method.check`` of :data:`daca_jax.rl.methods.METHODS`), in that order. Names must already resolve (:func:`check_names`).

  Raises:
    ConfigError: the first combination refused.
  """
  check_token_credit(cfg, CREDIT.get(cfg.rl.credit).token_level)
  check_pass_accum(cfg)
  for m in METHODS:
    if m.check is not None:
      m.check(cfg)
  return cfg


# Fields that moved into their method's own section: the error of an old name says where it is now.
MOVED_FIELDS = {
    **{f"credit.{k}": f"credit.dps.{k}" for k in ("alpha", "w_min", "w_max", "scope", "signal", "self_term")},
    "credit.tagger": "credit.dtca.tagger",
    **{f"credit.dtca_{k}": f"credit.dtca.{k}" for k in ("top_frac", "entropy_window", "calib_min", "calib_max")},
    **{f"credit.delta_{k}": f"credit.delta.{k}" for k in ("lambda_min", "lambda_max", "gamma")},
    **{f"likelihood.{k}": f"likelihood.stratified.{k}" for k in ("num_strata", "partition")},
    **{f"likelihood.coupled_{k}": f"likelihood.coupled.{k}" for k in ("t_min", "t_max", "full_pass")},
    "likelihood.elbo_nodes": "likelihood.elbo.nodes",
    "likelihood.trajectory_groups": "likelihood.trajectory.groups",
    **{f"likelihood.rldf_{k}": f"likelihood.rldf.{k}" for k in ("states", "sampling", "temperature")},
    "rl.clip_eps_high": "rl.map.clip_eps_high",
    "rl.map_position_weight": "rl.map.position_weight",
    "rl.rldf_tau": "rl.rldf.tau",
}


def upgrade_config_dict(d: Mapping[str, Any]) -> dict[str, Any]:
  """A saved config (a run's ``config.json``) with fields written before they moved into their
  method's section (:data:`MOVED_FIELDS`) put where they are now; everything else unchanged.

  A user's own config is not upgraded (an old name there is a ConfigError saying where it moved);
  this is for reading the records of runs made before the move.
  """
  out = json.loads(json.dumps(d))
  for old, new in MOVED_FIELDS.items():
    section, name = old.split(".")
    if isinstance(out.get(section), dict) and name in out[section]:
      value = out[section].pop(name)
      node = out
      *parents, leaf = new.split(".")
      for part in parents:
        node = node.setdefault(part, {})
      node.setdefault(leaf, value)
  return out


def _build(cls: type, values: Mapping[str, Any], prefix: str) -> Any:
  names = {f.name: f for f in dataclasses.fields(cls)}
  if not isinstance(values, Mapping):  # e.g. a saved config.json whose "rl" is a number
    raise ConfigError(prefix, values, f"a section of fields {sorted(names)} (set them as {prefix}.<field>=...)")
  unknown = sorted(set(values) - set(names))
  if unknown:
    name = f"{prefix}.{unknown[0]}"
    moved = f" ({name} is now {MOVED_FIELDS[name]})" if name in MOVED_FIELDS else ""
    raise ConfigError(name, values[unknown[0]], f"a field of {prefix}: {sorted(names)}{moved}")
  kwargs = {}
  for k, v in values.items():
    default = getattr(cls(), k)
    if dataclasses.is_dataclass(default):  # a method's own sub-section, e.g. credit.dps
      if hasattr(v, "to_dict"):
        v = v.to_dict()
      kwargs[k] = _build(type(default), v, f"{prefix}.{k}")
      continue
    if isinstance(default, Mapping):
      if hasattr(v, "to_dict"):
        v = v.to_dict()
      if not isinstance(v, Mapping):
        raise ConfigError(f"{prefix}.{k}", v, "a mapping of names to values")
      v = dict(v)
    if isinstance(default, float) and isinstance(v, int) and not isinstance(v, bool):
      try:
        v = float(v)
      except OverflowError:
        raise ConfigError(f"{prefix}.{k}", v, "a finite number") from None
    kwargs[k] = v
  return cls(**kwargs)


def train_config_from_dict(d: Mapping[str, Any]) -> TrainConfig:
  """Builds and validates (:func:`validate`) a :class:`TrainConfig` from a (nested) mapping or
  ConfigDict.

  Raises:
    ConfigError: an unknown section or field, or a value that is not allowed.
  """
  if hasattr(d, "to_dict"):
    d = d.to_dict()
  if not isinstance(d, Mapping):  # e.g. a config file's get_config() that returns None or a number
    raise ConfigError("config", d, "a mapping of config sections (get_config() returns an "
                      "ml_collections.ConfigDict, e.g. configs/base.py's)")
  sections = {"seed": d.get("seed", 0)}
  classes = {f.name: type(getattr(TrainConfig(), f.name)) for f in dataclasses.fields(TrainConfig)
             if f.name != "seed"}
  for key, value in d.items():
    if key == "seed":
      continue
    if key not in classes:
      raise ConfigError(key, "<section>", f"one of the sections {sorted(classes)} or 'seed'")
    sections[key] = _build(classes[key], value, key)
  return validate(TrainConfig(**sections))


def with_overrides(cfg: TrainConfig, overrides: Sequence[tuple[str, Any]]) -> TrainConfig:
  """``cfg`` with dotted fields replaced (``("likelihood.trajectory.groups", 4)``), validated.

  Raises:
    ConfigError: an unknown section or field, or a value that is not allowed.
  """
  d = cfg.to_dict()
  for path, value in overrides:
    *sections, field = path.split(".")
    node = d
    for name in sections:
      if not isinstance(node.get(name), dict):
        moved = f" ({path} is now {MOVED_FIELDS[path]})" if path in MOVED_FIELDS else ""
        raise ConfigError(path, value, f"a field of a config section (sections: {sorted(d)}){moved}")
      node = node[name]
    if field not in node:
      moved = f" ({path} is now {MOVED_FIELDS[path]})" if path in MOVED_FIELDS else ""
      raise ConfigError(path, value, f"one of the fields of {'.'.join(sections) or 'the config'}: "
                        f"{sorted(node)}{moved}")
    if isinstance(node[field], dict):  # a whole section: the fields given replace those fields only
      if not isinstance(value, Mapping):
        raise ConfigError(path, value, f"a mapping of fields of the section {path} ({sorted(node[field])}), "
                          f"or one field as {path}.<field>")
      node[field] = {**node[field], **value}
      continue
    node[field] = value
  return train_config_from_dict(d)
