"""Gumbel noise for a window of positions (and a subset of rows), equal to a slice of the full draw.

The sampler's documented PRNG use draws ``jax.random.gumbel(key, [B, L, V], float32)`` at every step
(:mod:`daca_jax.diffusion.rollout`); at LLaDA-8B size that array alone is 8 GB (B 64, L 256,
V 126464). Only positions where a token can be committed need it. With JAX's partitionable Threefry
(``jax_threefry_partitionable``, the default since JAX 0.5) element ``n`` of a draw of any shape is a
function of the key and of ``n`` alone (its row-major index is the Threefry counter, split in two
32-bit words), so :func:`gumbel_window` computes just the window's elements and returns bit for bit
``jax.random.gumbel(key, shape)[:, start:start + size]``: the tokens drawn for a given key do not change.
The same holds for a subset of the rows (``rows``), which is how a rollout sampled in micro-batches
(``rl.rollout_batch``) draws exactly the noise of its rows in the whole batch's draw. For any other key
implementation or setting it draws the full array and slices it (same values, full memory).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry2x32_p

_U32 = jnp.uint32


def exact_window_supported(key: jax.Array) -> bool:
  """True when :func:`gumbel_window` can compute the window alone (Threefry-2x32 key, partitionable
  Threefry, JAX's default low-dynamic-range Gumbel)."""
  if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
    impl = str(jax.random.key_impl(key))
  else:
    impl = jax.config.jax_default_prng_impl
  return ("threefry2x32" in impl and bool(jax.config.jax_threefry_partitionable)
          and not jax.config.jax_high_dynamic_range_gumbel)


def _mul_add_wide(a: jax.Array, b: int, c: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``a * b + c`` as (high, low) uint32 words of the exact 64-bit result (uint32 math wraps).

  ``a`` uint32 [...], ``b`` a Python int < 2**32, ``c`` uint32 [...] broadcastable to ``a``."""
  b0, b1 = _U32(b & 0xFFFF), _U32(b >> 16)
  a0, a1 = a & _U32(0xFFFF), a >> _U32(16)
  hi, lo = a1 * b1, a0 * b0
  for part in (a0 * b1, a1 * b0):  # each < 2**32; contributes part << 16
    add = part << _U32(16)
    new_lo = lo + add
    hi = hi + (part >> _U32(16)) + (new_lo < lo).astype(_U32)
    lo = new_lo
  new_lo = lo + c
  hi = hi + (new_lo < lo).astype(_U32)
  return hi, new_lo


def counters(shape: tuple[int, int, int], start: jax.Array | int, size: int,
             rows: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """Threefry counters (high, low uint32 [R, size, V]) of the elements ``[rows, start:start+size, :]``
  of a ``shape = (B, L, V)`` draw (``rows`` int32 [R] row indices; None: all B rows): their row-major
  flat indices as two 32-bit words."""
  b, length, v = shape
  if b * length >= 2 ** 32 or v >= 2 ** 32:
    raise ValueError(f"gumbel_window: shape {shape} has more than 2**32 rows or columns")
  row = jnp.arange(b, dtype=_U32) if rows is None else jnp.asarray(rows).astype(_U32)
  rows = (row[:, None] * _U32(length)
          + jnp.asarray(start).astype(_U32) + jnp.arange(size, dtype=_U32)[None, :])
  return _mul_add_wide(rows[:, :, None], v, jnp.arange(v, dtype=_U32)[None, None, :])


def gumbel_window(key: jax.Array, shape: tuple[int, int, int], start: jax.Array | int,
                  size: int, rows: jax.Array | None = None) -> jax.Array:
  """``jax.random.gumbel(key, shape, float32)[rows, start:start + size]`` without drawing the rest.

  Args:
    key: a PRNG key (raw uint32 [2] or typed).
    shape: (B, L, V) of the full draw (static).
    start: first position of the window (int or int32 [] traced); ``start + size <= L``.
    size: window length (static).
    rows: int32 [R] indices (< B) of the rows wanted (may be traced); None: all B rows.
  Returns:
    float32 [R, size, V] (R = B without ``rows``), bit-identical to the slice of the full draw.
  """
  if not exact_window_supported(key):
    full = jax.random.gumbel(key, shape, jnp.float32)
    window = jax.lax.dynamic_slice_in_dim(full, start, size, axis=1)
    return window if rows is None else window[jnp.asarray(rows)]
  data = jax.random.key_data(key) if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) else key
  hi, lo = counters(shape, start, size, rows)
  bits1, bits2 = threefry2x32_p.bind(data[0], data[1], hi, lo)
  bits = bits1 ^ bits2
  # jax.random.uniform(minval=tiny, maxval=1) for float32: 23 random mantissa bits in [1, 2), minus 1.
  tiny = np.float32(jnp.finfo(jnp.float32).tiny)
  one_bits = np.array(1.0, np.float32).view(np.uint32)
  floats = jax.lax.bitcast_convert_type((bits >> _U32(9)) | _U32(one_bits), jnp.float32) - 1.0
  u = jnp.maximum(tiny, floats * (np.float32(1.0) - tiny) + tiny)
  return -jnp.log(-jnp.log(u))
