"""The whole job's configuration: a :class:`~daca_jax.types.TrainConfig` built from a ConfigDict and
checked in full, including every name a registry resolves.

:mod:`daca_jax.types` sits below the packages that own the registries (diffusion, credit,
likelihood, rl, tasks all import it), so its ``validate`` methods check values and shapes only; the
names (``rl.objective``, ``rl.credit``, ``rl.likelihood``, ``rl.advantage``, ``rollout.remasking``,
``credit.tagger``, ``task.name``) are checked here, above those packages, before any work starts.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from daca_jax.credit import CREDIT, TAGGERS
from daca_jax.diffusion.remasking import REMASKING
from daca_jax.errors import ConfigError
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.registry import Registry
from daca_jax.rl.advantages import ADVANTAGES
from daca_jax.rl.objectives import OBJECTIVES
from daca_jax.tasks import TASKS
from daca_jax.types import TrainConfig

# (section, field, registry): each named field of a TrainConfig and the registry that resolves it.
NAMED_FIELDS: tuple[tuple[str, str, Registry[Any]], ...] = (
    ("rollout", "remasking", REMASKING), ("credit", "tagger", TAGGERS), ("rl", "objective", OBJECTIVES),
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
    value = getattr(getattr(cfg, section), name)
    if value == "" and (section, name) in _EMPTY_ALLOWED:
      continue
    registry.get(value)  # its error names registry.field, which is f"{section}.{name}"
  return cfg


def validate(cfg: TrainConfig) -> TrainConfig:
  """``cfg.validate()`` (values, cross-section checks) and :func:`check_names`; returns ``cfg``.

  Raises:
    ConfigError: the first field that is not allowed.
  """
  return check_names(cfg.validate())


def _build(cls: type, values: Mapping[str, Any], prefix: str) -> Any:
  names = {f.name: f for f in dataclasses.fields(cls)}
  unknown = sorted(set(values) - set(names))
  if unknown:
    raise ConfigError(f"{prefix}.{unknown[0]}", values[unknown[0]], f"a field of {prefix}: {sorted(names)}")
  kwargs = {}
  for k, v in values.items():
    default = getattr(cls(), k)
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
