"""Seeded generators for the ``json_schema`` task: small schemas, valid instances, broken instances.

* :func:`generate_small_schema` draws the tiny-model schemas: an object with 1-3 properties whose
  types are integer (optionally bounded), a string enum, boolean, or a small array of integers or
  enum strings, with a ``required`` list and sometimes ``"additionalProperties": false``.
* :func:`generate_instance` builds one instance for a (much larger) subset of JSON Schema: types,
  ``enum``/``const``, object properties and ``required``, arrays (``items``/``prefixItems``,
  ``minItems``), string lengths and common formats, numeric bounds and ``multipleOf``, local
  ``$ref``, ``allOf``/``anyOf``/``oneOf``. Every failure, whatever the schema holds, is raised as
  :class:`Unsupported` (never a TypeError or the like). It never guarantees validity: the only way
  to an instance that is used (an SFT target, a gold answer) is
  :meth:`daca_jax.tasks.json_schema.validation.CompiledSchema.instance`, which validates it against its
  schema and raises :class:`Unsupported` when it does not.
* :func:`break_instance` turns a valid instance into one that must fail: a missing required field, or
  a value of a type the schema does not allow at the top level.

Why one module over 350 lines: it is one recursive generator over a JSON-Schema subset, whose helpers
(objects, arrays, numbers, strings, the broken instance) call each other.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Mapping

import numpy as np

# Short property names and enum words keep the compact-JSON prompts short for byte-level models.
_NAMES = ("a", "b", "c", "d", "e", "f", "g", "h")
_WORDS = ("x", "y", "z", "on", "off", "up")

# Example strings that satisfy the common ``format`` values checked by jsonschema's format checkers.
_FORMAT_EXAMPLES = {
    "date-time": "2024-01-02T03:04:05Z",
    "date": "2024-01-02",
    "time": "03:04:05Z",
    "email": "a@b.co",
    "idn-email": "a@b.co",
    "uri": "https://example.com/a",
    "uri-reference": "https://example.com/a",
    "iri": "https://example.com/a",
    "url": "https://example.com/a",
    "hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
    "duration": "P1D",
    "regex": "a+",
    "json-pointer": "/a",
}

_MAX_DEPTH = 12  # recursion bound of generate_instance (recursive $refs stop here).
# Size bounds of a generated instance: schemas asking for more (``minItems: 1e9``, ``minLength:
# 1e9``, or large minimums nested inside each other) are Unsupported instead of exhausting memory.
MAX_INSTANCE_NODES = 10_000
MAX_STRING_LENGTH = 10_000


class Unsupported(Exception):
  """The schema uses something :func:`generate_instance` cannot satisfy."""


def generate_small_schema(rng: np.random.Generator) -> dict[str, Any]:
  """Draws one small object schema (Draft 2020-12 keywords, no ``$schema``).

  Args:
    rng: numpy Generator; the only source of randomness.

  Returns:
    ``{"type": "object", "properties": {...}, "required": [...], ...}`` with 1-3 properties.
  """
  n = int(rng.integers(1, 4))
  names = [str(x) for x in rng.choice(_NAMES, size=n, replace=False)]
  props: dict[str, Any] = {}
  for name in names:
    kind = int(rng.integers(4))
    if kind == 0:
      prop: dict[str, Any] = {"type": "integer"}
      if rng.random() < 0.4:
        lo = int(rng.integers(0, 5))
        prop.update(minimum=lo, maximum=lo + int(rng.integers(1, 10)))
    elif kind == 1:
      k = int(rng.integers(2, 4))
      prop = {"enum": [str(w) for w in rng.choice(_WORDS, size=k, replace=False)]}
    elif kind == 2:
      prop = {"type": "boolean"}
    else:
      if rng.random() < 0.5:
        items: dict[str, Any] = {"type": "integer"}
      else:
        items = {"enum": [str(w) for w in rng.choice(_WORDS, size=2, replace=False)]}
      prop = {"type": "array", "items": items, "maxItems": int(rng.integers(1, 4))}
    props[name] = prop
  required = [nm for nm in names if rng.random() < 0.7] or [names[0]]
  schema: dict[str, Any] = {"type": "object", "properties": props, "required": required}
  if rng.random() < 0.3:
    schema["additionalProperties"] = False
  return schema


def _types(schema: Mapping[str, Any]) -> list[str]:
  t = schema.get("type")
  if isinstance(t, str):
    return [t]
  if isinstance(t, list) and all(isinstance(x, str) for x in t):
    return list(t)
  return []


def _number(schema: Mapping[str, Any], integer: bool, rng: np.random.Generator | None) -> Any:
  lo = schema.get("minimum")
  hi = schema.get("maximum")
  ex_lo = schema.get("exclusiveMinimum")
  ex_hi = schema.get("exclusiveMaximum")
  # Draft 4 spells exclusive bounds as booleans next to minimum/maximum.
  if isinstance(ex_lo, bool):
    ex_lo = lo if ex_lo else None
  if isinstance(ex_hi, bool):
    ex_hi = hi if ex_hi else None
  low = max([v for v in (lo, None if ex_lo is None else ex_lo + 1) if isinstance(v, (int, float))],
            default=None)
  high = min([v for v in (hi, None if ex_hi is None else ex_hi - 1) if isinstance(v, (int, float))],
             default=None)
  base = low if low is not None else (min(high, 0) if high is not None else 0)
  if rng is not None and low is not None and high is not None and high >= low:
    base = low + int(rng.integers(0, int(min(high - low, 20)) + 1))
  elif rng is not None and low is None and high is None:
    base = int(rng.integers(0, 10))
  value = int(np.ceil(base)) if integer or float(base).is_integer() else base
  step = schema.get("multipleOf")
  if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0:
    value = int(np.ceil(value / step)) * step
    if integer and not float(value).is_integer():
      raise Unsupported("integer multipleOf")
  return int(value) if integer else value


def _string(schema: Mapping[str, Any], rng: np.random.Generator | None) -> str:
  fmt = schema.get("format")
  if isinstance(fmt, str) and fmt in _FORMAT_EXAMPLES:
    return _FORMAT_EXAMPLES[fmt]
  if "pattern" in schema:
    raise Unsupported("pattern")
  lo = schema.get("minLength", 0)
  hi = schema.get("maxLength")
  lo = lo if isinstance(lo, int) else 0
  length = max(lo, 1)
  if isinstance(hi, int):
    length = min(length, hi)
  if length > MAX_STRING_LENGTH:
    raise Unsupported(f"minLength {lo} > {MAX_STRING_LENGTH}")
  if rng is not None and length > 0:
    return "".join(str(rng.choice(list("abcxyz"))) for _ in range(length))
  return "a" * length


def generate_instance(schema: Any, resolve: Callable[[str], Any] | None = None,
                      rng: np.random.Generator | None = None) -> Any:
  """Builds an instance intended to validate against ``schema`` (best effort; validate it).

  With ``rng=None`` the result is the deterministic, minimal choice (required properties only,
  ``minItems`` items, the first enum value). With an ``rng`` it also draws optional properties,
  array lengths within bounds, integers within bounds and enum members.

  Args:
    schema: a JSON Schema (dict or bool).
    resolve: maps a ``$ref`` string to the referenced schema; ``None`` makes any ``$ref``
      unsupported.
    rng: optional numpy Generator for varied instances.

  Returns:
    A JSON-serializable value.

  Raises:
    Unsupported: the schema (or a required part of it) uses a keyword this generator cannot
      satisfy (``pattern``, ``not``, ``if``, unknown ``$ref``, too deep recursion, ...), or building
      the instance failed in any other way (odd keyword values such as a non-numeric ``minimum``,
      arithmetic overflow, ...): the message names the exception.
  """
  try:
    return _generate(schema, resolve, rng, 0, [MAX_INSTANCE_NODES])
  except Unsupported:
    raise
  except Exception as e:  # noqa: BLE001  any failure on an unseen schema means "not covered"
    raise Unsupported(f"generator failed: {type(e).__name__}: {str(e)[:120]}") from e


def _generate(schema: Any, resolve: Callable[[str], Any] | None, rng: np.random.Generator | None,
              _depth: int, budget: list[int]) -> Any:
  """:func:`generate_instance` without the conversion of failures to Unsupported; ``budget`` holds
  the number of nodes the instance may still get."""
  budget[0] -= 1
  if budget[0] < 0:
    raise Unsupported(f"instance larger than {MAX_INSTANCE_NODES} nodes")
  if _depth > _MAX_DEPTH:
    raise Unsupported("too deep")
  if schema is True or schema == {}:
    return None if rng is None else int(rng.integers(0, 10))
  if not isinstance(schema, dict):
    raise Unsupported(f"schema {schema!r}")
  for key in ("not", "if", "dependentSchemas", "contains", "patternProperties", "dependencies"):
    if key in schema:
      raise Unsupported(key)
  sub = lambda s: _generate(s, resolve, rng, _depth + 1, budget)  # noqa: E731
  if "$ref" in schema and isinstance(schema["$ref"], str):
    if resolve is None:
      raise Unsupported("$ref")
    rest = {k: v for k, v in schema.items() if k != "$ref"}
    target = resolve(schema["$ref"])
    if isinstance(target, dict) and rest:
      merged = {**target, **{k: v for k, v in rest.items() if k not in target}}
      return sub(merged)
    return sub(target)
  if "const" in schema:
    return copy.deepcopy(schema["const"])
  if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
    options = schema["enum"]
    pick = 0 if rng is None else int(rng.integers(len(options)))
    return copy.deepcopy(options[pick])
  if "allOf" in schema and isinstance(schema["allOf"], list):
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema["allOf"]:
      if isinstance(part, dict) and "$ref" in part and resolve is not None:
        part = resolve(part["$ref"])
      if not isinstance(part, dict):
        raise Unsupported("allOf part")
      for k, v in part.items():
        if k == "properties" and isinstance(v, dict):
          merged["properties"] = {**merged.get("properties", {}), **v}
        elif k == "required" and isinstance(v, list):
          merged["required"] = list(dict.fromkeys(merged.get("required", []) + v))
        else:
          merged.setdefault(k, v)
    return sub(merged)
  for key in ("anyOf", "oneOf"):
    if key in schema and isinstance(schema[key], list) and schema[key]:
      rest = {k: v for k, v in schema.items() if k != key}
      for option in schema[key]:
        try:
          if isinstance(option, dict) and rest:
            return sub({**rest, **option})
          return sub(option)
        except Unsupported:
          continue
      raise Unsupported(key)
  types = _types(schema)
  if not types:
    if "properties" in schema or "required" in schema:
      types = ["object"]
    elif "items" in schema or "prefixItems" in schema:
      types = ["array"]
    elif "minimum" in schema or "maximum" in schema:
      types = ["number"]
    else:
      types = ["string"]
  t = types[0] if "null" not in types[:1] or len(types) == 1 else types[1]
  if t == "object":
    return _object(schema, sub, rng)
  if t == "array":
    return _array(schema, sub, rng)
  if t == "string":
    return _string(schema, rng)
  if t == "integer":
    return _number(schema, True, rng)
  if t == "number":
    return _number(schema, False, rng)
  if t == "boolean":
    return True if rng is None else bool(rng.random() < 0.5)
  if t == "null":
    return None
  raise Unsupported(f"type {t!r}")


def _object(schema: Mapping[str, Any], sub: Callable[[Any], Any],
            rng: np.random.Generator | None) -> dict[str, Any]:
  props = schema.get("properties", {})
  if not isinstance(props, dict):
    raise Unsupported("properties")
  required = [r for r in schema.get("required", []) if isinstance(r, str)]
  out: dict[str, Any] = {}
  for name, prop in props.items():
    if name in required or (rng is not None and rng.random() < 0.5):
      try:
        out[name] = sub(prop)
      except Unsupported:
        if name in required:
          raise
  for name in required:
    if name not in out:
      extra = schema.get("additionalProperties", True)
      out[name] = sub(extra if isinstance(extra, dict) else True)
  min_props = schema.get("minProperties")
  if isinstance(min_props, int) and len(out) < min_props:
    for name, prop in props.items():
      if len(out) >= min_props:
        break
      if name not in out:
        out[name] = sub(prop)
    if len(out) < min_props:
      raise Unsupported("minProperties")
  return out


def _array(schema: Mapping[str, Any], sub: Callable[[Any], Any],
           rng: np.random.Generator | None) -> list[Any]:
  prefix = schema.get("prefixItems")
  items = schema.get("items", True)
  if isinstance(items, list):  # draft 4-7 tuple form
    prefix, items = items, schema.get("additionalItems", True)
  lo = schema.get("minItems", 0)
  lo = lo if isinstance(lo, int) else 0
  hi = schema.get("maxItems")
  n = lo
  if n > MAX_INSTANCE_NODES:
    raise Unsupported(f"minItems {lo} > {MAX_INSTANCE_NODES}")
  if rng is not None:
    top = min(hi if isinstance(hi, int) else lo + 2, lo + 3)
    n = int(rng.integers(lo, max(top, lo) + 1))
  out = []
  prefix = prefix if isinstance(prefix, list) else []
  for i in range(n):
    out.append(sub(prefix[i] if i < len(prefix) else items))
  if schema.get("uniqueItems") is True and len({repr(x) for x in out}) != len(out):
    raise Unsupported("uniqueItems")
  return out


def _value_of_other_type(allowed: list[str]) -> tuple[bool, Any]:
  """``(True, value)`` with a JSON value whose type is none of ``allowed``; ``(False, None)`` if
  every type is allowed."""
  candidates = [("object", {}), ("array", []), ("string", "?"), ("boolean", False), ("null", None),
                ("number", 0.5)]
  for t, value in candidates:  # 0.5 is a number but not an integer
    if t not in allowed:
      return True, value
  return False, None


def break_instance(schema: Any, instance: Any) -> tuple[Any, str] | None:
  """A variant of a valid ``instance`` that ``schema`` must reject, or None when no rule applies.

  Rules, in order: drop the first required property of a top-level object instance; otherwise
  replace the instance by a value of a type the top-level ``type`` keyword does not allow.

  Args:
    schema: the schema ``instance`` validates against.
    instance: a valid instance.

  Returns:
    ``(broken_instance, rule)`` with rule ``"missing_required"`` or ``"wrong_type"``, or None.
  """
  if not isinstance(schema, dict):
    return None
  required = schema.get("required")
  if isinstance(instance, dict) and isinstance(required, list) and required:
    name = required[0]
    if isinstance(name, str) and name in instance:
      broken = dict(instance)
      del broken[name]
      return broken, "missing_required"
  types = _types(schema)
  if types and "$ref" not in schema and not any(k in schema for k in ("anyOf", "oneOf", "allOf")):
    found, value = _value_of_other_type(types)
    if found:
      return value, "wrong_type"
  return None
