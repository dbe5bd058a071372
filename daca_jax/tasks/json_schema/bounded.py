"""jsonschema validators with bounded work: RE2 regexes, linear ``uniqueItems``, a work budget per validation.

:func:`bounded_validator_class` extends a jsonschema validator class: ``pattern``, ``patternProperties``
and ``additionalProperties`` match with RE2 (:func:`compile_pattern`: linear time, no backtracking;
ECMA-262 ``\\u`` escapes rewritten), ``uniqueItems`` compares canonical hashable forms, and every keyword
evaluation is charged ``1 + len(instance) + len(keyword value)`` to the budget that :func:`work_budget`
sets (:class:`BoundExceeded` past it). :mod:`daca_jax.tasks.json_schema.validation` explains the bounds
and re-exports the public names.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Iterator

import jsonschema
import jsonschema.validators
import re2
from jsonschema import ValidationError

MAX_VALIDATION_STEPS = 100_000  # work units per validation (module docstring); ~0.3 s of CPU


# -------------------------------------------------------------------------------------- regexes
class PatternError(ValueError):
  """A schema regex that RE2 cannot compile (syntax error, backreference, lookaround, too big)."""


def _to_re2_syntax(pattern: str) -> str:
  """Rewrites ECMA-262 ``\\uXXXX`` and ``\\u{X...}`` escapes to RE2's ``\\x{...}`` (one pass)."""
  if "\\u" not in pattern:
    return pattern
  out = []
  i, n = 0, len(pattern)
  while i < n:
    c = pattern[i]
    if c == "\\" and i + 1 < n:
      nxt = pattern[i + 1]
      if nxt == "u" and i + 6 <= n and all(h in "0123456789abcdefABCDEF" for h in pattern[i + 2:i + 6]):
        out.append("\\x{" + pattern[i + 2:i + 6] + "}")
        i += 6
        continue
      if nxt == "u" and i + 2 < n and pattern[i + 2] == "{":
        close = pattern.find("}", i + 3)
        if close > 0:
          out.append("\\x{" + pattern[i + 3:close] + "}")
          i = close + 1
          continue
      out.append(pattern[i:i + 2])
      i += 2
      continue
    out.append(c)
    i += 1
  return "".join(out)


@functools.lru_cache(maxsize=8192)
def compile_pattern(pattern: str) -> Any:
  """The RE2 program of a JSON-Schema regex (cached).

  Raises:
    PatternError: RE2 cannot compile it (the message says why).
  """
  options = re2.Options()
  options.log_errors = False
  try:
    return re2.compile(_to_re2_syntax(pattern), options)
  except Exception as e:  # noqa: BLE001  re2.error, and TypeError/ValueError on odd input
    raise PatternError(f"pattern {pattern!r}: {e}") from None


def _search(pattern: str, text: str) -> bool:
  return compile_pattern(pattern).search(text) is not None


# ----------------------------------------------------------------------------------- the budget
class BoundExceeded(Exception):
  """A validation needed more than its work budget (:data:`MAX_VALIDATION_STEPS` units)."""


_BUDGET = threading.local()


def _size(x: Any) -> int:
  return len(x) if isinstance(x, (str, list, dict)) else 0


def _charge(units: int) -> None:
  left = getattr(_BUDGET, "left", None)
  if left is not None:
    _BUDGET.left = left - units
    if left - units < 0:
      raise BoundExceeded(f"validation needed more than its budget of {_BUDGET.total} units")


def _charged(keyword: Callable[..., Any]) -> Callable[..., Iterator[ValidationError]]:
  """Wraps a jsonschema keyword function so that every evaluation is charged to the budget."""

  @functools.wraps(keyword)
  def charged(validator, value, instance, schema):
    _charge(1 + _size(instance) + _size(value))
    errors = keyword(validator, value, instance, schema)
    if errors:
      yield from errors

  return charged


# ---------------------------------------------------------------- keywords replaced for bounds
def _pattern(validator, pattern, instance, schema):
  if validator.is_type(instance, "string") and not _search(pattern, instance):
    yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, pattern_properties, instance, schema):
  if not validator.is_type(instance, "object"):
    return
  for pattern, subschema in pattern_properties.items():
    for key, value in instance.items():
      if _search(pattern, key):
        yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator, additional, instance, schema):
  """jsonschema's ``additionalProperties`` with the ``patternProperties`` regexes on RE2."""
  if not validator.is_type(instance, "object"):
    return
  properties = schema.get("properties", {})
  patterns = list(schema.get("patternProperties", {}))
  extras = [k for k in instance
            if k not in properties and not any(_search(p, k) for p in patterns)]
  if validator.is_type(additional, "object"):
    for extra in extras:
      yield from validator.descend(instance[extra], additional, path=extra)
  elif not additional and extras:
    yield ValidationError(f"additional properties are not allowed ({sorted(extras)!r} unexpected)")


def _canonical(value: Any) -> Any:
  """A hashable form equal for JSON-equal values: ``1 == 1.0`` but ``True != 1``, object key order
  ignored, array order kept (jsonschema's ``equal``)."""
  if isinstance(value, bool):
    return ("b", value)
  if isinstance(value, (int, float)):
    return ("n", value)
  if isinstance(value, str):
    return ("s", value)
  if isinstance(value, list):
    return ("a", tuple(_canonical(v) for v in value))
  if isinstance(value, dict):
    return ("o", frozenset((k, _canonical(v)) for k, v in value.items()))
  return ("z", repr(value))


def _unique_items(validator, unique, instance, schema):
  if unique and validator.is_type(instance, "array"):
    seen = set()
    for item in instance:
      key = _canonical(item)
      if key in seen:
        yield ValidationError(f"{instance!r} has non-unique elements")
        return
      seen.add(key)


_REPLACED = {"pattern": _pattern, "patternProperties": _pattern_properties,
             "additionalProperties": _additional_properties, "uniqueItems": _unique_items}


@functools.lru_cache(maxsize=None)
def bounded_validator_class(cls: type) -> type:
  """``cls`` (a jsonschema validator class) with RE2 regexes, linear ``uniqueItems`` and every keyword
  charged to the work budget."""
  keywords = {name: _REPLACED.get(name, fn) for name, fn in cls.VALIDATORS.items()}
  return jsonschema.validators.extend(cls, {name: _charged(fn) for name, fn in keywords.items()})


# ---------------------------------------------------------------------------------- compilation


@contextlib.contextmanager
def work_budget(max_steps: int) -> Iterator[None]:
  """Validations inside the block may spend ``max_steps`` work units (per thread; nested blocks restore
  the outer budget)."""
  previous = getattr(_BUDGET, "left", None), getattr(_BUDGET, "total", None)
  _BUDGET.left = _BUDGET.total = int(max_steps)
  try:
    yield
  finally:
    _BUDGET.left, _BUDGET.total = previous
