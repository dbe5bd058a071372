"""Chooses the update strategy from ``cfg.parallel``: what the learner calls.

``none``: plain ``jax.jit`` on the default device. ``pmap``: :mod:`daca_jax.parallel.data_parallel`.
``fsdp``: :mod:`daca_jax.parallel.fsdp`. All three take and return the same values.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
from jax.sharding import Mesh

from daca_jax.contracts import ParamSplit
from daca_jax.likelihood.base import LikelihoodFn
from daca_jax.parallel.data_parallel import make_pmap_update, shard_rows
from daca_jax.parallel.fsdp import fsdp_shardings, make_fsdp_update
from daca_jax.parallel.mesh import (abstract_placed, batch_shardings, check_batch_size, make_mesh, replicated,
                                    returning_trainable, with_frozen)
from daca_jax.types import ParallelConfig


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
    lowers the compiled step (memory planning).
  Raises:
    ConfigError: mesh shape vs device count, or (at call time) a batch that does not split evenly.
  """
  cfg.validate()
  if cfg.strategy == "none":
    step = jax.jit(returning_trainable(update_fn, param_split), donate_argnums=(1,))
    if param_split is None:
      return step

    def call(params, *rest):
      return with_frozen(params, step(params, *rest), param_split)

    call.lower = step.lower
    return call
  mesh = make_mesh(cfg) if mesh is None else mesh
  if cfg.strategy == "pmap":
    return make_pmap_update(update_fn, mesh, param_split)
  return make_fsdp_update(update_fn, mesh, param_split)


def shard_rollout(rollout_fn: Callable[..., Any], cfg: ParallelConfig,
                  mesh: Mesh | None = None) -> Callable[..., Any]:
  """Places a rollout's inputs so that the jitted sampler runs split over the batch.

  ``rollout_fn(params, prompts[B, P], key, **rows) -> Trajectory`` (already jitted, e.g.
  ``make_rollout_fn``) is partitioned by the compiler from its input shardings: prompts over
  ``('data', 'fsdp')``, parameters replicated (``pmap``) or FSDP-sharded (``fsdp``). Samples equal
  the one-device rollout's (``jax_threefry_partitionable`` makes the Gumbel noise layout-free).
  ``rows`` (a micro-batch's ``rows`` int32 [B], placed like the prompts, and ``total_rows``) pass
  through (:func:`daca_jax.diffusion.rollout.rollout_in_micro_batches`).

  The returned function's ``lower(params, prompts, key)`` lowers the sampler for abstract arguments
  (``ShapeDtypeStruct`` values) placed the same way, nothing allocated (memory planning).

  Raises:
    ConfigError: B is not a multiple of ``data x fsdp``.
  """
  if cfg.strategy == "none":
    return rollout_fn
  mesh = make_mesh(cfg) if mesh is None else mesh

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
      return rollout_fn(params, prompts, key, **extra)

  def lower(params, prompts, key, *, rows=None, total_rows=0):
    """``lower`` of the jitted sampler for abstract arguments placed as ``call`` places them."""
    p_sh, pr_sh, k_sh = shardings(params, prompts)
    args = (abstract_placed(params, p_sh), abstract_placed(prompts, pr_sh), abstract_placed(key, k_sh))
    with jax.set_mesh(mesh):
      return rollout_fn.lower(*args, **rows_kw(rows, total_rows, abstract_placed))

  call.lower = lower
  return call
