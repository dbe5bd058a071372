"""Where batch-first activations live under a device mesh: rows split over the batch axes.

Under ``parallel.strategy="fsdp"`` the weights are sharded over 'fsdp' and so are the rows of the batch
(ZeRO-3). A matrix product of batch-sharded activations with a weight sharded on its input dimension
then has two layouts to choose from, and GSPMD, left to itself, often picks the tensor-parallel one:
every device computes partial sums over all B rows and the layer outputs are all-reduced. Pinning the
activations to the batch layout at the model's layer boundaries makes the compiler all-gather each
layer's weights instead, as FSDP (MaxText, t5x, Tunix: activations annotated with the data axes)
intends. Values are unchanged; only the compiled program's communication is.

Two calls do it:

* :func:`batch_sharded` at a layer boundary: ``h [B, ...]`` constrained to rows over the batch axes.
* :func:`map_rows`, a ``jax.vmap`` over rows for code that evaluates a batch row by row (one key per
  row, :func:`daca_jax.parallel.per_sequence_keys`). Inside it every row is a batch of one, so a
  constraint on the row's own leading axis cannot split it; the vmap carries the batch axes instead
  (``spmd_axis_name``) and :func:`batch_sharded` pins the rest of the row unsplit, which the vmap turns
  into rows over the batch axes.

Both are the identity without a mesh (one device), inside ``shard_map`` (manual axes: pmap's own rows)
and when the rows do not split evenly. This module sits with the contracts because the model, the
likelihood estimators and the parallel package all use it and none may import another for it.
"""
from __future__ import annotations

import contextlib
import math
import threading
from typing import Any, Callable, Iterator

import jax
from jax.sharding import PartitionSpec as P

# The mesh axes a batch is split over (daca_jax.parallel.mesh builds meshes with them).
BATCH_AXES = ("data", "fsdp")

# Depth of map_rows vmaps being traced on this thread: inside one, the row axis carries BATCH_AXES.
_ROW_MAPPED = threading.local()


def batch_shards() -> int:
  """Devices the current mesh splits a batch over: ``data x fsdp`` when a mesh whose batch axes are
  automatic (GSPMD-partitioned) is set, else 1 (no mesh, or manual axes inside ``shard_map``)."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or not set(BATCH_AXES) <= set(mesh.auto_axes):
    return 1
  return math.prod(mesh.shape[a] for a in BATCH_AXES)


def _rows_mapped() -> bool:
  return getattr(_ROW_MAPPED, "depth", 0) > 0


@contextlib.contextmanager
def _mapping_rows() -> Iterator[None]:
  _ROW_MAPPED.depth = getattr(_ROW_MAPPED, "depth", 0) + 1
  try:
    yield
  finally:
    _ROW_MAPPED.depth -= 1


def batch_sharded(h: jax.Array) -> jax.Array:
  """``h [B, ...]`` with its rows split over the batch axes of the current mesh.

  Returns ``h`` unchanged when :func:`batch_shards` is 1 or B does not split evenly. Inside
  :func:`map_rows` the row axis already carries the batch axes, so ``h`` (one row's values) is pinned
  unsplit instead (``P()``, which the row map extends to rows over the batch axes).
  """
  shards = batch_shards()
  if shards == 1:
    return h
  if _rows_mapped():
    return jax.lax.with_sharding_constraint(h, P())
  if h.ndim == 0 or h.shape[0] % shards:
    return h
  return jax.lax.with_sharding_constraint(h, P(BATCH_AXES))


def map_rows(fn: Callable[..., Any], *args: Any) -> Any:
  """``jax.vmap(fn)(*args)`` over the leading (row) axis of every leaf of ``args``, with the rows split
  over the batch axes of the current mesh when it has automatic batch axes and the rows split evenly
  (``spmd_axis_name``; :func:`batch_sharded` inside ``fn`` then keeps each row whole on its device).
  The same values as the plain vmap."""
  rows = jax.tree.leaves(args)[0].shape[0]
  shards = batch_shards()
  if shards == 1 or rows % shards:
    return jax.vmap(fn)(*args)
  with _mapping_rows():
    return jax.vmap(fn, spmd_axis_name=BATCH_AXES)(*args)


__all__ = ["BATCH_AXES", "batch_shards", "batch_sharded", "map_rows"]
