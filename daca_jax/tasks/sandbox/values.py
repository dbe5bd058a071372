"""Plain values across the sandbox boundary: a strict codec and strict comparisons.

Standard library only, no imports from this package: the text of this module also runs inside the
sandboxed judge and candidate processes (:mod:`daca_jax.tasks.sandbox.judge`).

Wire format: one JSON text (``json.dumps(..., allow_nan=False)``, ASCII) per value. JSON ``null``,
``true``/``false``, integers, floats, strings and arrays are ``None``, ``bool``, ``int``, ``float``,
``str`` and ``list``; every other value is an object with exactly one key:
``{"tuple": [...]}``, ``{"set": [...]}``, ``{"frozenset": [...]}``, ``{"dict": [[k, v], ...]}``,
``{"bytes": "<hex>"}``, ``{"float": "nan" | "inf" | "-inf"}``, ``{"complex": [re, im]}``.

:func:`decode` is what the trusted side relies on: whatever bytes a hostile program sends, it either
raises :class:`PlainDataError` or returns a value built only from EXACT builtin types (never a
subclass, never an object with its own ``__eq__``), at most :data:`MAX_DEPTH` deep, with integers
of at most 4300 digits (Python's default ``int`` string-conversion limit). Nothing is executed.
:func:`encode` converts subclasses of builtins (``namedtuple``, ``IntEnum``, ``OrderedDict``, ...)
to their base values as an honest program expects; in a sandboxed process a program may replace it,
which changes nothing on the trusted side.

:func:`same` is the trusted side's equality: Python's ``==`` restricted to values of the same kind
(``bool`` is not a number, ``1 == True`` is false, ``int`` and ``float`` compare numerically, NaN
equals nothing, a ``list`` never equals a ``tuple``, sets and dict keys compare by the same rule).
"""
from __future__ import annotations

import json
import math

MAX_DEPTH = 100
_NUMBERS = (int, float)
_SCALARS = (type(None), bool, str, bytes, complex)
_TAGS = ("tuple", "set", "frozenset", "dict", "bytes", "float", "complex")


class PlainDataError(ValueError):
  """A value is not plain data (encoding) or a text is not a valid encoding (decoding)."""


# --- encoding (either side) ----------------------------------------------------------------------
def _float(x: float) -> object:
  return x if math.isfinite(x) else {"float": "nan" if x != x else ("inf" if x > 0 else "-inf")}


def _to_json(v: object, depth: int) -> object:
  if depth > MAX_DEPTH:
    raise PlainDataError(f"nested deeper than {MAX_DEPTH}")
  if v is None or v is True or v is False:
    return v
  d = depth + 1
  # isinstance, then the base type's own methods: a subclass is sent as its base value.
  if isinstance(v, int):
    return int.__int__(v)
  if isinstance(v, float):
    return _float(float.__float__(v))
  if isinstance(v, str):
    return str.__str__(v)
  if isinstance(v, (bytes, bytearray)):
    return {"bytes": bytes(v).hex()}
  if isinstance(v, complex):
    return {"complex": [_float(v.real), _float(v.imag)]}
  if isinstance(v, list):
    return [_to_json(x, d) for x in list.__iter__(v)]
  if isinstance(v, tuple):
    return {"tuple": [_to_json(x, d) for x in tuple.__iter__(v)]}
  if isinstance(v, frozenset):
    return {"frozenset": [_to_json(x, d) for x in frozenset.__iter__(v)]}
  if isinstance(v, set):
    return {"set": [_to_json(x, d) for x in set.__iter__(v)]}
  if isinstance(v, dict):
    return {"dict": [[_to_json(k, d), _to_json(x, d)] for k, x in dict.items(v)]}
  raise PlainDataError(f"a {type(v).__name__} is not plain data (allowed: None, bool, int, float, "
                       "complex, str, bytes, list, tuple, set, frozenset, dict)")


def encode(value: object) -> str:
  """The wire text of ``value``.

  Raises:
    PlainDataError: ``value`` holds something that is not plain data, is too deep, or an integer
      too long to convert.
  """
  try:
    return json.dumps(_to_json(value, 0), allow_nan=False, separators=(",", ":"))
  except (ValueError, RecursionError) as e:  # e.g. an int beyond the digit limit
    if isinstance(e, PlainDataError):
      raise
    raise PlainDataError(f"cannot encode: {type(e).__name__}: {e}") from None


# --- decoding (the trusted side's guarantee) -----------------------------------------------------
class _Tagged:
  __slots__ = ("tag", "value")

  def __init__(self, tag: str, value: object):
    self.tag, self.value = tag, value


def _pairs(pairs: list) -> _Tagged:
  if len(pairs) != 1 or pairs[0][0] not in _TAGS:
    raise PlainDataError(f"an object must have exactly one key out of {list(_TAGS)}")
  return _Tagged(*pairs[0])


def _reject_constant(name: str) -> None:
  raise PlainDataError(f"{name} is not allowed (non-finite floats are tagged)")


def _build(x: object, depth: int) -> object:
  if depth > MAX_DEPTH:
    raise PlainDataError(f"nested deeper than {MAX_DEPTH}")
  t = type(x)
  if x is None or t in (bool, int, float, str):
    return x
  d = depth + 1
  if t is list:
    return [_build(v, d) for v in x]
  if t is not _Tagged:
    raise PlainDataError(f"unexpected {t.__name__}")
  tag, v = x.tag, x.value
  if tag == "float":
    if v not in ("nan", "inf", "-inf"):
      raise PlainDataError(f"bad float {v!r}")
    return float(v)
  if tag == "bytes":
    if type(v) is not str:
      raise PlainDataError("bytes must be a hex string")
    try:
      return bytes.fromhex(v)
    except ValueError:
      raise PlainDataError("bytes must be a hex string") from None
  if type(v) is not list:
    raise PlainDataError(f"{tag} must hold an array")
  if tag == "complex":
    parts = [_build(p, d) for p in v]
    if len(parts) != 2 or any(type(p) not in _NUMBERS for p in parts):
      raise PlainDataError("complex must be [re, im]")
    return complex(*parts)
  if tag == "dict":
    out = {}
    for item in v:
      if type(item) is not list or len(item) != 2:
        raise PlainDataError("dict items must be [key, value] pairs")
      key = _build(item[0], d)
      _check_hashable(key)
      out[key] = _build(item[1], d)
    return out
  items = [_build(p, d) for p in v]
  if tag == "tuple":
    return tuple(items)
  for item in items:
    _check_hashable(item)
  return set(items) if tag == "set" else frozenset(items)


def _check_hashable(v: object) -> None:
  t = type(v)
  if t in (list, dict, set):
    raise PlainDataError(f"a {t.__name__} cannot be a set element or dict key")
  if t is tuple:
    for x in v:
      _check_hashable(x)


def decode(text: str | bytes) -> object:
  """The value of a wire text (see the module docstring for the guarantee).

  Raises:
    PlainDataError: ``text`` is not a valid encoding.
  """
  try:
    return _build(json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_pairs), 0)
  except PlainDataError:
    raise
  except (ValueError, TypeError, RecursionError, MemoryError) as e:
    raise PlainDataError(f"not a valid encoding: {type(e).__name__}: {str(e)[:200]}") from None


# --- strict comparisons (the trusted side) -------------------------------------------------------
def _key(v: object, depth: int = 0) -> object:
  """A hashable key equal for exactly the values :func:`same` calls equal (sets, dict keys)."""
  if depth > MAX_DEPTH:
    raise RecursionError("value nested too deep to compare")
  t = type(v)
  if t in _NUMBERS:
    return ("number", v)
  if t is tuple:
    return ("tuple", tuple(_key(x, depth + 1) for x in v))
  if t is frozenset:
    return ("frozenset", frozenset(_key(x, depth + 1) for x in v))
  return (t, v)


def same(a: object, b: object, depth: int = 0) -> bool:
  """Strict equality (see the module docstring)."""
  if depth > MAX_DEPTH:
    raise RecursionError("value nested too deep to compare")
  ta, tb = type(a), type(b)
  if ta in _NUMBERS and tb in _NUMBERS:
    return a == b
  if ta is not tb:
    return False
  if ta in _SCALARS:
    return a == b
  if ta in (list, tuple):
    return len(a) == len(b) and all(same(x, y, depth + 1) for x, y in zip(a, b))
  if ta in (set, frozenset):
    return len(a) == len(b) and {_key(x) for x in a} == {_key(y) for y in b}
  if ta is dict:
    if len(a) != len(b):
      return False
    other = {_key(k): v for k, v in b.items()}
    for k, v in a.items():
      kk = _key(k)
      if kk not in other or not same(v, other[kk], depth + 1):
        return False
    return True
  # Two values of the same other type: only the trusted side makes those (decode never does).
  return a == b


def has_nan(v: object, depth: int = 0) -> bool:
  """Whether ``v`` is or holds a NaN (a float or a complex part)."""
  if depth > MAX_DEPTH:
    return False
  t = type(v)
  if t is float:
    return v != v
  if t is complex:
    return v != v
  if t in (list, tuple, set, frozenset):
    return any(has_nan(x, depth + 1) for x in v)
  if t is dict:
    return any(has_nan(k, depth + 1) or has_nan(x, depth + 1) for k, x in v.items())
  return False
