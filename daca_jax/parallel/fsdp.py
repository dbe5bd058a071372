"""FSDP update: ``jax.jit`` with ``NamedSharding``.

Parameters, the reference parameters and the optimizer state are sharded over the 'fsdp' axis, each
array on its largest dimension divisible by the axis size (replicated when none is); the batch is
split over ``('data', 'fsdp')``. The update function itself is unchanged: the compiler (GSPMD)
inserts the all-gathers of weights before use and the reduce-scatters of gradients, and random draws
are independent of the layout (``jax_threefry_partitionable``), so the result equals the one-device
update up to the order of floating-point sums.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from daca_jax.contracts import ParamSplit
from daca_jax.parallel import aot
from daca_jax.parallel.mesh import (batch_shardings, check_batch_size, replicated, returning_trainable,
                                    with_frozen)


def fsdp_spec(shape: tuple[int, ...], fsdp_size: int) -> P:
  """PartitionSpec sharding the largest dimension divisible by ``fsdp_size`` over 'fsdp'.

  Ties go to the earlier dimension. Scalars, and arrays with no divisible dimension, are replicated
  (``P()``), as is everything when ``fsdp_size == 1``.
  """
  if fsdp_size <= 1:
    return P()
  best = None
  for i, n in enumerate(shape):
    if n % fsdp_size == 0 and (best is None or n > shape[best]):
      best = i
  if best is None:
    return P()
  spec = [None] * len(shape)
  spec[best] = "fsdp"
  return P(*spec)


def fsdp_shardings(tree: Any, mesh: Mesh) -> Any:
  """``NamedSharding`` per leaf of a parameter or optimizer-state tree (see :func:`fsdp_spec`).

  Optimizer moments have the shapes of their parameters, so they are sharded the same way; step
  counters (scalars) are replicated.
  """
  size = mesh.shape["fsdp"]
  return jax.tree.map(lambda x: NamedSharding(mesh, fsdp_spec(tuple(getattr(x, "shape", ())), size)),
                      tree)


def make_fsdp_update(update_fn: Callable[..., Any], mesh: Mesh,
                     param_split: ParamSplit | None = None) -> Callable[..., Any]:
  """Compiles ``update_fn(params, opt_state, ref_params, traj, rewards, weights, key)`` for FSDP.

  Args:
    update_fn: the learner's one-device update (``GRPOLearner._update``): returns
      ``(params, opt_state, metrics)``.
    mesh: from :func:`daca_jax.parallel.make_mesh`.
    param_split: the trainable part of the parameters (LoRA's adapters): the compiled step returns
      only that part, and the frozen rest is the caller's arrays (no per-step copy of the base).
  Returns:
    A function with the same signature and results; inputs are placed on the mesh (a no-op when
    they are already there), outputs stay sharded (params / opt_state FSDP, metrics replicated).
    The optimizer state passed in is donated (its buffers hold the new state). Its ``lower(*args)``
    lowers the same jitted step for abstract arguments (memory planning).
  Raises:
    ConfigError: the batch does not split evenly over ``data x fsdp``.
  """
  jitted = {}
  step_fn = returning_trainable(update_fn, param_split)

  def compiled_for(args):
    check_batch_size(args[4].shape[0], mesh)
    shardings = update_shardings(args, mesh)
    sig = jax.tree.structure(args)
    if sig not in jitted:
      out_params = shardings[0] if param_split is None else param_split.trainable(shardings[0])
      jitted[sig] = jax.jit(step_fn, in_shardings=shardings, donate_argnums=(1,),
                            out_shardings=(out_params, shardings[1], replicated(mesh)))
    return jitted[sig], shardings

  def call(params, opt_state, ref_params, traj, rewards, weights, key):
    step, shardings = compiled_for((params, opt_state, ref_params, traj, rewards, weights, key))
    placed = jax.device_put((params, opt_state, ref_params, traj, rewards, weights, key), shardings)
    with jax.set_mesh(mesh):
      return with_frozen(placed[0], call.aot.run(step, *placed), param_split)

  def lower(*args):
    """``jax.jit(...).lower`` of the step for these (possibly abstract, ``ShapeDtypeStruct``) args."""
    step, _ = compiled_for(args)
    with jax.set_mesh(mesh):
      return step.lower(*args)

  call.lower = lower
  call.aot = aot.Slot("update")
  return call


def update_shardings(args: tuple[Any, ...], mesh: Mesh) -> tuple[Any, ...]:
  """Shardings of the update's ``(params, opt_state, ref_params, traj, rewards, weights, key)``:
  parameter-like trees FSDP-sharded, batch trees split over the batch axes, the key replicated."""
  params, opt_state, ref_params, traj, rewards, weights, _ = args
  batch = rewards.shape[0]
  return (fsdp_shardings(params, mesh), fsdp_shardings(opt_state, mesh), fsdp_shardings(ref_params, mesh),
          batch_shardings(traj, mesh, batch), batch_shardings(rewards, mesh, batch),
          batch_shardings(weights, mesh, batch), replicated(mesh))
