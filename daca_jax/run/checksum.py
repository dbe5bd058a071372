"""A 64-bit checksum of a pytree's values, computed on device (for checkpoint integrity).

Every leaf is read as its raw bit pattern in 32-bit words (bfloat16 / int8 / bool leaves widened,
64-bit leaves split in two, PRNG keys as their key data). Two 32-bit lanes are summed modulo 2^32
over all words of all leaves:

* lane 1: ``word * m(i)`` with an odd multiplier ``m(i)`` per position: changing any single word
  (one flipped bit, byte or value) always changes the sum, since an odd number is invertible
  modulo 2^32;
* lane 2: murmur3's 32-bit finaliser of ``word`` xor a hash of its position, so that several changes
  cancel in both lanes only with probability ~2^-64, and moved or swapped values are detected.

Positions run over the leaves in tree order (leaf index and element index), so the checksum depends
on the values, their order and their dtypes' bit layout, not on how arrays are sharded. One jitted
pass over the tree; the result is read on the host as 16 hex digits. Small trees whose arrays this
process holds whole (a tiny model's checkpoint) take the same arithmetic in numpy on the host instead:
tracing and compiling the device program for each new tree structure costs ~0.3-1 s, hashing them
microseconds.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_GOLDEN = 0x9E3779B1  # 2^32 / golden ratio, odd: spreads leaf / position indices


def _fmix32(h: jax.Array) -> jax.Array:
  """murmur3's 32-bit finaliser (a bijection on uint32 with full avalanche)."""
  h = h ^ (h >> 16)
  h = h * jnp.uint32(0x85EBCA6B)
  h = h ^ (h >> 13)
  h = h * jnp.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


def _words(x: Any) -> jax.Array:
  """The raw bits of ``x`` as a flat uint32 vector."""
  x = jnp.asarray(x)
  if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.uint8)
  size = x.dtype.itemsize
  if jnp.issubdtype(x.dtype, jnp.complexfloating):
    x = jnp.stack([jnp.real(x), jnp.imag(x)], -1)
    size //= 2
  if size not in (1, 2, 4, 8):
    raise TypeError(f"cannot checksum dtype {x.dtype}")
  unsigned = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}[size]
  bits = jax.lax.bitcast_convert_type(x, unsigned)  # 8-byte items gain a trailing axis of 2 words
  return bits.astype(jnp.uint32).reshape(-1)


@jax.jit
def _lanes(tree: Any) -> jax.Array:
  total = jnp.zeros(2, jnp.uint32)
  for leaf_index, leaf in enumerate(jax.tree.leaves(tree)):
    w = _words(leaf)
    pos = jnp.arange(w.shape[0], dtype=jnp.uint32) + jnp.uint32((leaf_index * _GOLDEN) & 0xFFFFFFFF)
    lane1 = jnp.sum(w * (_fmix32(pos) | jnp.uint32(1)), dtype=jnp.uint32)
    lane2 = jnp.sum(_fmix32(w ^ _fmix32(pos ^ jnp.uint32(0x5BD1E995))), dtype=jnp.uint32)
    total = total + jnp.stack([lane1, lane2])
  return total


# Trees up to this size whose leaves are all fully addressable are hashed on the host.
_HOST_MAX_BYTES = 32 * 2**20


def _host_words(x: jax.Array) -> np.ndarray | None:
  """``_words(x)`` computed with numpy, or None where the device path must do it."""
  if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  a = np.asarray(x)
  if a.dtype == np.bool_:
    a = a.astype(np.uint8)
  if np.issubdtype(a.dtype, np.complexfloating):
    a = np.stack([a.real, a.imag], -1)
  size = a.dtype.itemsize
  if size not in (1, 2, 4):  # 64-bit words: left to XLA's bitcast, whose word order is the reference
    return None
  return np.ascontiguousarray(a).view({1: np.uint8, 2: np.uint16, 4: np.uint32}[size]).astype(np.uint32).reshape(-1)


def _np_fmix32(h: np.ndarray) -> np.ndarray:
  h = h ^ (h >> np.uint32(16))
  h = h * np.uint32(0x85EBCA6B)
  h = h ^ (h >> np.uint32(13))
  h = h * np.uint32(0xC2B2AE35)
  return h ^ (h >> np.uint32(16))


def _host_lanes(tree: Any) -> np.ndarray | None:
  """``_lanes(tree)`` in numpy (uint32 arithmetic wraps modulo 2^32 as XLA's does), or None."""
  leaves = [jnp.asarray(x) for x in jax.tree.leaves(tree)]  # jax's dtype canonicalisation, as _words
  if (sum(x.size * x.dtype.itemsize for x in leaves) > _HOST_MAX_BYTES
      or not all(x.is_fully_addressable for x in leaves)):
    return None
  total = np.zeros(2, np.uint32)
  with np.errstate(over="ignore"):
    for leaf_index, leaf in enumerate(leaves):
      w = _host_words(leaf)
      if w is None:
        return None
      pos = np.arange(w.shape[0], dtype=np.uint32) + np.uint32((leaf_index * _GOLDEN) & 0xFFFFFFFF)
      lane1 = np.sum(w * (_np_fmix32(pos) | np.uint32(1)), dtype=np.uint32)
      lane2 = np.sum(_np_fmix32(w ^ _np_fmix32(pos ^ np.uint32(0x5BD1E995))), dtype=np.uint32)
      total = total + np.array([lane1, lane2], np.uint32)
  return total


def tree_checksum(tree: Any) -> str:
  """16 hex digits identifying the values of ``tree`` (module docstring).

  Args:
    tree: a pytree of jax/numpy arrays (any shardings, global arrays of a multi-host run included)
      and Python scalars.
  Returns:
    The checksum, the same on every process.
  Raises:
    TypeError: a leaf whose dtype has no 1/2/4/8-byte bit layout.
  """
  lanes = _host_lanes(tree)
  if lanes is None:
    lanes = np.asarray(jax.device_get(_lanes(tree)), np.uint32)
  return f"{int(lanes[0]):08x}{int(lanes[1]):08x}"
