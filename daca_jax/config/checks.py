"""Field checks shared by every config section (types, ranges, allowed names) and the names the algorithms
dispatch on.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import typing
from typing import Any, Mapping

import jax.numpy as jnp
import numpy as np

from daca_jax.errors import ConfigError


# Names the config validates here and the algorithms dispatch on (daca_jax.likelihood.stratified,
# daca_jax.rl.downsample): one list each, so the two cannot drift apart.
STRATA_PARTITIONS = ("random", "per_prompt", "strided", "contiguous", "commit_order")
DOWNSAMPLE_RULES = ("max_variance", "random")
LR_SCHEDULES = ("constant", "cosine")  # rl.lr_schedule (daca_jax.rl.optim.make_optimizer)

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
_REMAT = ("none", "full", "dots", "dots_saveable")
_LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")


# Largest integer a config field may hold: sizes, counts and seeds become int32 array dimensions,
# indices or PRNG seeds, so anything beyond int32 cannot be used (and would fail late, e.g. with an
# OverflowError after SFT).
INT_MAX = 2**31 - 1
# Largest float magnitude: values are used in float32 (or bfloat16, same range) computations, where
# anything larger is inf.
FLOAT_MAX = float(np.finfo(np.float32).max)
# Float fields that may hold +-inf (none so far: every float field is a rate, a scale or a bound that
# must be a finite number). NaN is never allowed.
_INFINITE_OK: frozenset[str] = frozenset()


def _check_fields(prefix: str, obj: Any) -> None:
  """:func:`check_field_types` with the fields named ``<prefix>.<field>``."""
  check_field_types(obj, lambda name: f"{prefix}.{name}")


def check_field_types(obj: Any, field_name: typing.Callable[[str], str]) -> None:
  """Checks every field of a config dataclass against its declared type, generically.

  ``float`` fields hold finite real numbers within float32's range (bools excluded; ±inf only for
  the fields listed in ``_INFINITE_OK``), ``int`` fields integers in ``[-INT_MAX, INT_MAX]``, ``bool`` fields True/False
  and ``str`` fields strings. A section's own ``validate`` then checks the allowed ranges.

  Args:
    obj: a dataclass instance.
    field_name: how the error names a field (``"rl.beta"``, a flag ``"--temperature"``).
  Raises:
    ConfigError: naming the field, the value and what is allowed.
  """
  hints = typing.get_type_hints(type(obj))
  for f in dataclasses.fields(obj):
    kind, v, name = hints[f.name], getattr(obj, f.name), field_name(f.name)
    if kind is float:
      if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ConfigError(name, v, "a number")
      if math.isnan(v) or (abs(v) > FLOAT_MAX and name not in _INFINITE_OK):
        raise ConfigError(name, v, f"a finite number (of magnitude <= {FLOAT_MAX:.4g}, float32's largest)")
    elif kind is int:
      if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ConfigError(name, v, "an integer")
      if abs(v) > INT_MAX:
        raise ConfigError(name, v, f"an integer of magnitude <= {INT_MAX} (2**31 - 1)")
    elif kind is bool and not isinstance(v, bool):
      raise ConfigError(name, v, "True or False")
    elif kind is str and not isinstance(v, str):
      raise ConfigError(name, v, "a string")


def _check_sections(prefix: str, obj: Any) -> None:
  """:func:`_check_fields` of ``obj``'s own fields (sub-sections are not checked there), then each
  sub-section's ``validate`` under ``<prefix>.<section>``.

  Raises:
    ConfigError: a sub-section that is not its dataclass, or the first field that is not allowed.
  """
  _check_fields(prefix, obj)
  hints = typing.get_type_hints(type(obj))
  for f in dataclasses.fields(obj):
    kind = hints[f.name]
    if dataclasses.is_dataclass(kind):
      v = getattr(obj, f.name)
      if not isinstance(v, kind):
        raise ConfigError(f"{prefix}.{f.name}", v, f"a {kind.__name__} section ({prefix}.{f.name}.<field>=...)")
      v.validate(f"{prefix}.{f.name}")


def _check_values(name: str, value: Any) -> None:
  """The generic checks of :func:`_check_fields` for free-form values (``task.options``): floats
  finite, integers within int32, recursively through mappings and sequences."""
  if isinstance(value, Mapping):
    for k, v in value.items():
      _check_values(f"{name}.{k}", v)
  elif isinstance(value, (list, tuple)):
    for i, v in enumerate(value):
      _check_values(f"{name}[{i}]", v)
  elif isinstance(value, bool):
    return
  elif isinstance(value, numbers.Integral) and abs(value) > INT_MAX:
    raise ConfigError(name, value, f"an integer of magnitude <= {INT_MAX} (2**31 - 1)")
  elif isinstance(value, numbers.Real) and not abs(value) <= FLOAT_MAX:
    raise ConfigError(name, value, f"a finite number (of magnitude <= {FLOAT_MAX:.4g}, float32's largest)")


def _positive(prefix: str, obj: Any, *names: str) -> None:
  for name in names:
    v = getattr(obj, name)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
      raise ConfigError(f"{prefix}.{name}", v, "a positive integer")


def _non_negative(prefix: str, obj: Any, *names: str) -> None:
  for name in names:
    v = getattr(obj, name)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
      raise ConfigError(f"{prefix}.{name}", v, "a number >= 0")


def _one_of(prefix: str, obj: Any, name: str, allowed: tuple[str, ...]) -> None:
  v = getattr(obj, name)
  if v not in allowed:
    raise ConfigError(f"{prefix}.{name}", v, f"one of {list(allowed)}")
