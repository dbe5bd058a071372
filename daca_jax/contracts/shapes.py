"""Trace-time shape checks shared by the public entry points.

Every check runs on static shapes (Python ints), so under ``jit`` it costs nothing at run time and fails
while tracing, before any work. A failure is a :class:`daca_jax.errors.ShapeError` naming the
argument, the shape found and the shape expected.
"""
from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Sequence

import jax.numpy as jnp
import numpy as np

from daca_jax.errors import ConfigError, ShapeError

Dim = int | str  # an int is a required size; a str names a free dimension ("V", "D")


def shape_of(x: Any) -> tuple[int, ...]:
  """The static shape of an array, a tracer or a ``jax.ShapeDtypeStruct``."""
  return tuple(int(d) for d in np.shape(x)) if not hasattr(x, "shape") else tuple(x.shape)


def format_shape(expected: Sequence[Dim]) -> str:
  """``(4, 40, V)``: ints as numbers, free dimensions by name."""
  inner = ", ".join(str(d) for d in expected)
  return f"({inner},)" if len(expected) == 1 else f"({inner})"


def check_shape(name: str, x: Any, expected: Sequence[Dim], meaning: str) -> tuple[int, ...]:
  """Checks that ``x`` has the rank of ``expected`` and its int dimensions.

  Args:
    name: the argument as the caller knows it (``batch.advantages``).
    x: the array (or tracer, or ShapeDtypeStruct).
    expected: one entry per dimension: an int that must match, or a name for a free dimension.
    meaning: what the shape means, e.g. ``"[B]: one advantage per sequence"``.
  Returns:
    The shape found.
  Raises:
    ShapeError: a different rank or a different size where ``expected`` has an int.
  """
  if dataclasses.is_dataclass(x):  # e.g. a TokenScores where its .logp array belongs
    raise ShapeError(name, type(x).__name__, f"an array {format_shape(expected)} ({meaning})", what="type")
  found = shape_of(x)
  if len(found) != len(expected) or any(isinstance(e, int) and e != f for e, f in zip(expected, found)):
    raise ShapeError(name, found, f"{format_shape(expected)} ({meaning})")
  return found


def check_optional_shape(name: str, x: Any, expected: Sequence[Dim], meaning: str) -> None:
  """:func:`check_shape` when ``x`` is not None."""
  if x is not None:
    check_shape(name, x, expected, meaning)


def check_integer(name: str, x: Any) -> None:
  """``x`` holds integer ids (token arrays).

  Raises:
    ShapeError: a floating or boolean dtype (token ids must be integers).
  """
  dtype = jnp.dtype(x.dtype)
  if not jnp.issubdtype(dtype, jnp.integer):
    raise ShapeError(name, str(dtype), "an integer dtype (token ids)", what="dtype")


def check_static_int(name: str, value: Any, lo: int, hi: int, meaning: str) -> int:
  """A static (Python) integer in ``[lo, hi]``.

  Raises:
    ConfigError: a traced value, a non-integer, or a value outside ``[lo, hi]``.
  """
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    raise ConfigError(name, value, f"a static Python int in [{lo}, {hi}] ({meaning})")
  if not lo <= int(value) <= hi:
    raise ConfigError(name, int(value), f"an int in [{lo}, {hi}] ({meaning})")
  return int(value)


def check_tokens(tokens: Any, prompt_len: Any, name: str = "tokens") -> tuple[int, int, int]:
  """Checks rollout sequences ``tokens [B, P+L]`` and their prompt length.

  Args:
    tokens: int [B, P+L] prompt then completion.
    prompt_len: P, a static int with ``0 <= P < P+L`` (at least one completion position).
  Returns:
    (B, P, L).
  Raises:
    ShapeError: ``tokens`` not a rank-2 integer array.
    ConfigError: ``prompt_len`` not a static int in ``[0, T-1]``.
  """
  b, total = check_shape(name, tokens, ("B", "P+L"), "[B, P+L]: prompt then completion per row")
  check_integer(name, tokens)
  p = check_static_int("prompt_len", prompt_len, 0, total - 1,
                       f"the prompt length P of {name} [B, P+L] = {(b, total)}; L = P+L - P >= 1")
  return b, p, total - p


def check_completion_rows(name: str, x: Any, batch: int, prompt_len: int, length: int,
                          meaning: str) -> None:
  """``x`` is a per-completion-position array ``[B, L]`` of the same rows as ``tokens``.

  A width mismatch is reported with the prompt length that would fit, since an off-by-one
  ``prompt_len`` is the usual cause.

  Raises:
    ShapeError: a shape other than ``(B, L)``.
  """
  if x is None:
    return
  found = shape_of(x)
  if found != (batch, length):
    hint = ""
    if len(found) == 2 and found[0] == batch and found[1] != length:
      hint = (f"; L = P+L - prompt_len = {prompt_len + length} - {prompt_len}: does prompt_len="
              f"{prompt_len} miscount the prompt (prompt_len={prompt_len + length - found[1]} fits)?")
    raise ShapeError(name, found, f"{format_shape((batch, length))} ([B, L]: {meaning}){hint}")
