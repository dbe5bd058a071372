"""The device mesh: axes ``('data', 'fsdp', 'tensor')`` and the shardings built on it."""
from __future__ import annotations

import math
from typing import Any, Sequence

import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from daca_jax.contracts import ParamSplit
from daca_jax.contracts.sharding import BATCH_AXES
from daca_jax.errors import ConfigError
from daca_jax.config.parallel import ParallelConfig

AXES = ("data", "fsdp", "tensor")
# Sequences are split over ('data', 'fsdp'): FSDP shards hold different rows as well as different
# parameter slices (ZeRO-3), so every device works on its own part of the batch.


def mesh_shape(cfg: ParallelConfig, num_devices: int) -> tuple[int, int, int]:
  """``(data, fsdp, tensor)`` sizes for ``num_devices`` devices (``data == 0`` takes the rest).

  Raises:
    ConfigError: the sizes do not multiply to ``num_devices``; the message names the fields, their
      values and the number of devices available.
  """
  cfg.validate()
  rest = cfg.fsdp * cfg.tensor
  data = cfg.data or max(num_devices // rest, 1)
  shape = (data, cfg.fsdp, cfg.tensor)
  if math.prod(shape) != num_devices:
    raise ConfigError("parallel.(data, fsdp, tensor)", (cfg.data, cfg.fsdp, cfg.tensor),
                      f"sizes whose product is the {num_devices} devices available "
                      f"(this mesh {shape} needs {math.prod(shape)}; data=0 takes the remaining devices)")
  return shape


def make_mesh(cfg: ParallelConfig, devices: Sequence[Any] | None = None) -> Mesh:
  """Builds the mesh over ``devices`` (default: all devices of all processes).

  Every axis is ``AxisType.Auto``, passed explicitly: the compiler propagates shardings through the
  unmodified model code. (``Explicit`` axes would make every op with an ambiguous result sharding,
  e.g. a matmul contracting an FSDP-sharded dimension, an error unless the model annotates it.)

  Raises:
    ConfigError: see :func:`mesh_shape`.
  """
  devices = list(jax.devices() if devices is None else devices)
  shape = mesh_shape(cfg, len(devices))
  return jax.make_mesh(shape, AXES, axis_types=(AxisType.Auto,) * len(AXES), devices=devices)


def num_batch_shards(mesh: Mesh) -> int:
  """Devices the batch is split over: ``data * fsdp``."""
  return math.prod(mesh.shape[a] for a in BATCH_AXES)


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def check_batch_size(batch: int, mesh: Mesh, field: str = "rl.prompts_per_step * rl.group_size") -> None:
  """Raises ConfigError (naming ``field``) unless ``batch`` rows split evenly over the batch shards."""
  check_batch_shards(batch, mesh.shape["data"], mesh.shape["fsdp"], field)


def check_batch_shards(batch: int, data: int, fsdp: int, field: str = "rl.prompts_per_step * rl.group_size") -> None:
  """:func:`check_batch_size` from the mesh's sizes (:func:`mesh_shape`), before any mesh is built."""
  if batch % (data * fsdp):
    raise ConfigError(field, batch, f"a multiple of the {data * fsdp} batch shards (parallel.data x "
                      f"parallel.fsdp = {data} x {fsdp})")


def batch_shardings(tree: Any, mesh: Mesh, batch: int) -> Any:
  """Per-leaf shardings that split the batch axis over ``('data', 'fsdp')``.

  The batch axis of a leaf is its first axis of size ``batch`` (axis 0 for ``tokens [B, T]``, axis 1
  for ``step_conf [S, B, L]``); leaves without one (scalars, keys) are replicated.
  """

  def one(x: Any) -> NamedSharding:
    shape = getattr(x, "shape", ())
    if batch not in shape:
      return replicated(mesh)
    spec = [None] * len(shape)
    spec[shape.index(batch)] = BATCH_AXES
    return NamedSharding(mesh, P(*spec))

  return jax.tree.map(one, tree)


def abstract_placed(tree: Any, shardings: Any) -> Any:
  """``jax.ShapeDtypeStruct`` leaves of ``tree`` (arrays or abstract values) carrying ``shardings``
  (a tree like ``tree``, or one sharding for every leaf): what ``jit(...).lower`` takes to compile
  a sharded program without allocating anything."""
  if isinstance(shardings, jax.sharding.Sharding):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=shardings), tree)
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def returning_trainable(update_fn: Any, split: ParamSplit | None) -> Any:
  """``update_fn(params, ...) -> (params, opt_state, metrics)`` made to return only
  ``split.trainable(params)`` in place of ``params`` (``update_fn`` itself when ``split`` is None).

  Compiled, the step then has no output the size of the frozen parameters; :func:`with_frozen`
  puts the caller's frozen arrays back around the new trainable part.
  """
  if split is None:
    return update_fn

  def update(params: Any, *rest: Any) -> Any:
    new_params, opt_state, metrics = update_fn(params, *rest)
    return split.trainable(new_params), opt_state, metrics

  return update


def with_frozen(params: Any, out: tuple[Any, Any, Any], split: ParamSplit | None) -> tuple[Any, Any, Any]:
  """``(params, opt_state, metrics)`` from a step compiled with :func:`returning_trainable`."""
  if split is None:
    return out
  trainable, opt_state, metrics = out
  return split.replace(params, trainable), opt_state, metrics
