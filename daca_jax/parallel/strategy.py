"""Chooses the update strategy from ``cfg.parallel``: what the learner calls.

``none``: plain ``jax.jit`` on the default device. ``pmap``: :mod:`daca_jax.parallel.data_parallel`.
``fsdp``: :mod:`daca_jax.parallel.fsdp`. All three take and return the same values.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import jax
import numpy as np
from jax.sharding import Mesh

from daca_jax.contracts import ParamSplit
from daca_jax.parallel import aot
from daca_jax.likelihood.base import LikelihoodFn
from daca_jax.parallel.data_parallel import make_pmap_update, shard_rows
from daca_jax.parallel.fsdp import fsdp_shardings, make_fsdp_update
from daca_jax.parallel.mesh import (abstract_placed, batch_shardings, check_batch_size, make_mesh, replicated,
                                    returning_trainable, with_frozen)
from daca_jax.config.parallel import ParallelConfig


def wrap_likelihood(estimator: LikelihoodFn, cfg: ParallelConfig) -> LikelihoodFn:
  """The estimator the update must call: row-sharded under ``pmap``, unchanged otherwise."""
  return shard_rows(estimator) if cfg.strategy == "pmap" else estimator


def compile_update(update_fn: Callable[..., Any], cfg: ParallelConfig,
                   mesh: Mesh | None = None, *, param_split: ParamSplit | None = None) -> Callable[..., Any]:
  """Compiles ``update_fn(params, opt_state, ref_params, traj, rewards, weights, key)``.

  The optimizer state passed in is donated under every strategy: its buffers are reused for the new
  state (one copy of Adam's moments less), so the caller must not read it after the call. Parameters
  are not donated: callers pass the same arrays as params and ref_params.

  Args:
    update_fn: the one-device update (with its estimator from :func:`wrap_likelihood`).
    cfg: ``parallel`` config section.
    mesh: default ``make_mesh(cfg)`` over all devices (unused for ``none``).
    param_split: the part of the parameters the update changes (:data:`daca_jax.models.lora.LORA_SPLIT`):
      the compiled step returns only that part and the rest is the caller's arrays, so no copy of
      the frozen base is made per step. Results are the same.
  Returns:
    ``fn`` with the same signature and results ``(params, opt_state, metrics)``; ``fn.lower(*args)``
    lowers the compiled step (memory planning); ``fn.aot`` (:class:`daca_jax.parallel.aot.Slot`) takes
    an executable compiled ahead of time.
  Raises:
    ConfigError: mesh shape vs device count, or (at call time) a batch that does not split evenly.
  """
  cfg.validate()
  if cfg.strategy == "none":
    step = jax.jit(returning_trainable(update_fn, param_split), donate_argnums=(1,))

    def call(params, *rest):
      return with_frozen(params, call.aot.run(step, params, *rest), param_split)

    call.lower = step.lower
    call.aot = aot.Slot("update")
    return call
  mesh = make_mesh(cfg) if mesh is None else mesh
  if cfg.strategy == "pmap":
    return make_pmap_update(update_fn, mesh, param_split)
  return make_fsdp_update(update_fn, mesh, param_split)


# "auto" gathers the rollout's weights once per call when they take at most this fraction of a device's
# memory: the rest holds the FSDP shards, the optimizer state, the canvas, the logits chunks and the
# step records (LLaDA-8B in bf16: 16 GB, 20% of an 80 GB H100, 17% of a v5p chip; not a 16 GB v5e).
ROLLOUT_GATHER_FRACTION = 0.4


def tree_bytes(tree: Any) -> float:
  """Bytes of all leaves of ``tree`` (arrays or ``ShapeDtypeStruct`` values), unsharded."""
  return float(sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)))


def device_memory_bytes() -> float | None:
  """The first local device's memory (``memory_stats()['bytes_limit']``), None where it is not reported
  (CPU)."""
  stats = jax.local_devices()[0].memory_stats() or {}
  limit = stats.get("bytes_limit")
  return float(limit) if limit else None


def gathers_rollout_weights(cfg: ParallelConfig, param_bytes: float, device_bytes: float | None) -> bool:
  """Whether an FSDP rollout all-gathers the weights once per call (``parallel.rollout_weights``):
  "gathered" always, "sharded" never, "auto" when ``param_bytes`` (the whole parameter tree) is at most
  :data:`ROLLOUT_GATHER_FRACTION` of ``device_bytes`` or the latter is unknown (None)."""
  if cfg.strategy != "fsdp" or cfg.rollout_weights == "sharded":
    return False
  if cfg.rollout_weights == "gathered" or device_bytes is None:
    return True
  return param_bytes <= ROLLOUT_GATHER_FRACTION * device_bytes


def shard_rollout(rollout_fn: Callable[..., Any], cfg: ParallelConfig, mesh: Mesh | None = None, *,
                  device_bytes: float | None = None) -> Callable[..., Any]:
  """Places a rollout's inputs so that the jitted sampler runs split over the batch.

  ``rollout_fn(params, prompts[B, P], key, **rows) -> Trajectory`` (already jitted, e.g.
  ``make_rollout_fn``) is partitioned by the compiler from its input shardings: prompts over
  ``('data', 'fsdp')``, parameters replicated (``pmap``) or FSDP-sharded (``fsdp``). Samples equal
  the one-device rollout's (``jax_threefry_partitionable`` makes the Gumbel noise layout-free).
  ``rows`` (a micro-batch's ``rows`` int32 [B], placed like the prompts, and ``total_rows``) pass
  through (:func:`daca_jax.diffusion.rollout.rollout_in_micro_batches`).

  Under ``fsdp`` the sampler reads the sharded weights in one of two ways
  (:func:`gathers_rollout_weights` of ``parallel.rollout_weights``): all-gathered once at the start of
  the call and held for its S model calls (the compiled program carries one gather of the model per
  call), or each layer's weights gathered at every model call (S gathers of the model per call, nothing
  extra resident). ``device_bytes`` is the memory of the device "auto" decides for (default: the
  local device's, :func:`device_memory_bytes`; a plan passes its target's).

  The returned function's ``lower(params, prompts, key)`` lowers the sampler for abstract arguments
  (``ShapeDtypeStruct`` values) placed the same way, nothing allocated (memory planning); its
  ``gathers_weights(params)`` says which way the weights are read; its ``aot``
  (:class:`daca_jax.parallel.aot.Slot`) takes an executable compiled ahead of time (every strategy).

  Raises:
    ConfigError: B is not a multiple of ``data x fsdp``.
  """
  if cfg.strategy == "none":
    def one_device(params, prompts, key, **rows):
      return one_device.aot.run(rollout_fn, params, prompts, key, **rows)

    one_device.lower = rollout_fn.lower
    one_device.aot = aot.Slot("rollout", static=("total_rows",))
    return one_device
  mesh = make_mesh(cfg) if mesh is None else mesh

  def gathers(params):
    # Only "auto" reads a device's memory: a plan for compile-only devices (which report none) resolves
    # it for its target first, so nothing here asks a device that is not there.
    if cfg.rollout_weights != "auto":
      return gathers_rollout_weights(cfg, tree_bytes(params), None)
    memory = device_memory_bytes() if device_bytes is None else device_bytes
    return gathers_rollout_weights(cfg, tree_bytes(params), memory)

  # The weights constrained to replicated at the program's start: one all-gather per call, and every
  # model call inside reads local copies (rollout_fn's own jit is inlined into this one).
  gathered_fn = jax.jit(lambda params, *args, **kw: rollout_fn(
      jax.lax.with_sharding_constraint(params, replicated(mesh)), *args, **kw), static_argnames=("total_rows",))

  def program(params):
    return gathered_fn if gathers(params) else rollout_fn

  def shardings(params, prompts):
    check_batch_size(prompts.shape[0], mesh)
    p_sh = fsdp_shardings(params, mesh) if cfg.strategy == "fsdp" else replicated(mesh)
    return p_sh, batch_shardings(prompts, mesh, prompts.shape[0]), replicated(mesh)

  def rows_kw(rows, total_rows, place):
    if rows is None:
      return {}
    return {"rows": place(rows, batch_shardings(rows, mesh, rows.shape[0])), "total_rows": total_rows}

  def call(params, prompts, key, *, rows=None, total_rows=0):
    params, prompts, key = jax.device_put((params, prompts, key), shardings(params, prompts))
    extra = rows_kw(rows, total_rows, jax.device_put)
    with jax.set_mesh(mesh):
      return call.aot.run(program(params), params, prompts, key, **extra)

  def lower(params, prompts, key, *, rows=None, total_rows=0):
    """``lower`` of the jitted sampler for abstract arguments placed as ``call`` places them."""
    p_sh, pr_sh, k_sh = shardings(params, prompts)
    args = (abstract_placed(params, p_sh), abstract_placed(prompts, pr_sh), abstract_placed(key, k_sh))
    with jax.set_mesh(mesh):
      return program(params).lower(*args, **rows_kw(rows, total_rows, abstract_placed))

  call.lower = lower
  call.gathers_weights = gathers
  call.aot = aot.Slot("rollout", static=("total_rows",))
  return call
