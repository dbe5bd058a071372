"""Data-parallel ("pmap") update: parameters replicated, each device scores its own rows.

Written with ``jax.shard_map`` (what ``jax.pmap`` is built on in current JAX) over the mesh axes
``('data', 'fsdp')``, one jitted step. The costly part of an update, the likelihood passes and their
backward, is split by rows; everything downstream of the per-token log-probs (group advantages,
token-mean or batch-normalised losses, the optimizer) runs on the whole batch on every device, so
no normalisation ever sees a partial batch and groups are never split, whatever the shard size.

Gradient flow. Device i computes ``logp`` for its rows and all-gathers the ``[B, L]`` matrix; the
loss is the global loss on every device. The transpose of the all-gather (a reduce-scatter of the
identical cotangents of n devices) hands device i ``n · ∂loss/∂logp_i``, so its per-device gradient is
``n`` times its rows' share of the global gradient; ``lax.pmean`` of those per-device gradients
over the device axes is exactly the full-batch gradient. The mean is taken inside the backward pass
(:func:`_pmean_grads`), so the learner's own clipping, grad-norm metric and optimizer see the full
gradient and parameters stay identical on every device.

Randomness. An estimator draws its masks from one key for a ``[B, ...]`` shape, so a shard of b rows
would draw different masks than the same rows in the full batch. :func:`per_sequence_keys` draws each
sequence's masks from ``fold_in(key, global_row)`` instead: the result then depends neither on the
number of devices nor on the shard a row lands on (the masks differ from a plain one-device call
with the same key, not in distribution).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P

from daca_jax.errors import ConfigError
from daca_jax.likelihood.base import LikelihoodFn
from daca_jax.contracts import ParamSplit
from daca_jax.contracts.sharding import map_rows
from daca_jax.parallel import aot
from daca_jax.parallel.mesh import (BATCH_AXES, abstract_placed, check_batch_size, replicated, returning_trainable,
                                    with_frozen)


def per_sequence_keys(estimator: LikelihoodFn, row_offset: jax.Array | int = 0) -> LikelihoodFn:
  """The estimator evaluated sequence by sequence, row r drawing from ``fold_in(key, row_offset + r)``.

  Same signature and outputs as ``estimator`` (a :class:`~daca_jax.contracts.TokenScores`, whose
  leaves all lead with B); rows are ``jax.vmap``-ed, so the model still sees one batched call per
  pass. Array keyword arguments (``commit_step``, ``commit_conf``, ...) are per-row. An estimator
  that couples rows (e.g. one masking rate drawn for the whole batch, or stratified's
  ``partition="per_prompt"``, whose G rows of a prompt share their strata) becomes per-sequence.
  The returned function also takes ``row_offset=`` (int or int32 [], added to this one) when called:
  the first row's index in a larger batch, for a micro-batch of it (``rl.grad_accum``); it is marked
  ``row_keyed``.
  """
  if getattr(estimator, "row_keyed", False):
    raise ValueError("per_sequence_keys: the estimator already draws per row (per_sequence_keys or "
                     "shard_rows); pass its row_offset when calling it instead")
  base_offset = row_offset

  @functools.wraps(estimator)
  def fn(logits_fn, params, tokens, prompt_len, key, cfg, *, mask_id, row_offset: jax.Array | int = 0,
         **rows_kw):
    rows = base_offset + row_offset + jnp.arange(tokens.shape[0], dtype=jnp.int32)
    keys = jax.vmap(jax.random.fold_in, (None, 0))(key, rows)
    kw = {k: v for k, v in rows_kw.items() if v is not None}
    none = {k: None for k, v in rows_kw.items() if v is None}

    def one(tok, k, kw):
      out = estimator(logits_fn, params, tok[None], prompt_len, k, cfg, mask_id=mask_id, **none,
                      **jax.tree.map(lambda x: x[None], kw))
      return jax.tree.map(lambda x: x[0], out)

    return map_rows(one, tokens, keys, kw)

  fn.row_keyed = True
  return fn


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _pmean_grads(tree: Any, axes: tuple[str, ...]) -> Any:
  """Identity whose backward pass is ``lax.pmean`` over ``axes``: per-device gradients -> their mean."""
  return tree


def _pmean_fwd(tree, axes):
  return tree, None


def _pmean_bwd(axes, _, ct):
  return (jax.lax.pmean(ct, axes),)


_pmean_grads.defvjp(_pmean_fwd, _pmean_bwd)


def shard_rows(estimator: LikelihoodFn, axes: tuple[str, ...] = BATCH_AXES) -> LikelihoodFn:
  """The estimator for use inside ``shard_map`` with replicated inputs: this device scores its rows.

  Device i (linear index over ``axes``) takes rows ``[i·b, (i+1)·b)`` of the replicated ``tokens``,
  scores them with :func:`per_sequence_keys` (global row numbers), and all-gathers the result, so
  every device returns the full ``logp [B, L]`` (every leaf of a tree output). Gradients reach
  ``params`` as the pmean of the per-device gradients (module docstring). Called with
  ``row_offset=`` (a micro-batch of a larger batch, ``rl.grad_accum``), the rows' keys are those of
  their places in the larger batch (``row_keyed``, as :func:`per_sequence_keys`).

  Raises:
    ConfigError: B is not a multiple of the number of devices over ``axes``.
  """

  @functools.wraps(estimator)
  def fn(logits_fn, params, tokens, prompt_len, key, cfg, *, mask_id, row_offset: jax.Array | int = 0,
         **rows_kw):
    n = jax.lax.axis_size(axes)
    batch = tokens.shape[0]
    if batch % n:
      raise ConfigError("rl.prompts_per_step * rl.group_size", batch,
                        f"a multiple of the {n} devices of mesh axes {axes}")
    b = batch // n
    start = jax.lax.axis_index(axes) * b
    take = lambda x: jax.lax.dynamic_slice_in_dim(x, start, b, axis=0)
    local = per_sequence_keys(estimator, start)(logits_fn, _pmean_grads(params, axes), take(tokens),
                                                prompt_len, key, cfg, mask_id=mask_id, row_offset=row_offset,
                                                **jax.tree.map(take, rows_kw))
    return jax.tree.map(lambda x: jax.lax.all_gather(x, axes, axis=0, tiled=True), local)

  fn.row_keyed = True
  return fn


def make_pmap_update(update_fn: Callable[..., Any], mesh: Mesh,
                     param_split: ParamSplit | None = None) -> Callable[..., Any]:
  """Compiles a data-parallel update: one jitted ``shard_map`` over the mesh.

  Args:
    update_fn: ``(params, opt_state, ref_params, traj, rewards, weights, key) -> (params, opt_state,
      metrics)``, whose likelihood estimator is wrapped with :func:`shard_rows` (the learner does this
      when ``parallel.strategy == "pmap"``); everything else in it is the one-device code.
    mesh: from :func:`daca_jax.parallel.make_mesh`; the batch is split over its ``data x fsdp``
      devices, parameters and optimizer state are replicated.
    param_split: the trainable part of the parameters (LoRA's adapters): the compiled step returns
      only that part, and the frozen rest is the caller's arrays (no per-step copy of the base).
  Returns:
    A function with the same signature; all outputs are replicated over the mesh. The optimizer
    state placed on the mesh is donated (its buffers hold the new state). Its
    ``lower(*args)`` lowers the same jitted step for abstract arguments (memory planning).
  Raises:
    ConfigError: the batch does not split evenly over ``data x fsdp``.
  """
  # check_vma=False: per-device values with pmap semantics; the only cross-device terms are the
  # explicit all-gather and pmean above, and every output is identical on all devices.
  body = jax.shard_map(returning_trainable(update_fn, param_split), mesh=mesh, in_specs=P(), out_specs=P(),
                       check_vma=False)
  step = jax.jit(body, donate_argnums=(1,))

  def call(params, opt_state, ref_params, traj, rewards, weights, key):
    check_batch_size(rewards.shape[0], mesh)
    args = jax.device_put((params, opt_state, ref_params, traj, rewards, weights, key), replicated(mesh))
    with jax.set_mesh(mesh):
      return with_frozen(args[0], call.aot.run(step, *args), param_split)

  def lower(*args):
    """``jax.jit(...).lower`` of the step for these (possibly abstract, ``ShapeDtypeStruct``) args."""
    check_batch_size(args[4].shape[0], mesh)
    with jax.set_mesh(mesh):
      return step.lower(*abstract_placed(args, replicated(mesh)))

  call.lower = lower
  call.aot = aot.Slot("update")
  return call
