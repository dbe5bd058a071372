"""Optimizers (optax): AdamW with global-norm clipping and linear warmup, and a gradient-agreement
monitor (the cosine between successive rollout batches' gradients) that shows when an RL update is
dominated by noise."""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax


class GradAgreementState(NamedTuple):
  """State of :func:`grad_agreement`.

  Attributes:
    prev: the raw gradient of the previous rollout batch (first update on it); same tree as params.
    count: int32 scalar, updates seen.
    cos: float32 scalar, cosine between the latest batch's gradient and the previous batch's
      (0 before two batches were seen).
  """

  prev: Any
  count: jax.Array
  cos: jax.Array


def _tree_dot(a: Any, b: Any) -> jax.Array:
  # An elementwise product and a full reduction, not ``jnp.vdot``: vdot flattens its operands, and
  # flattening an array sharded on a non-leading dimension (FSDP's layout of the stacked layer
  # weights) makes the compiler all-gather it whole, in float32, on every device (~3 copies of the
  # model per device in the compiled 8B update; experiments/plan.py).
  return sum((jnp.sum(x.astype(jnp.float32) * y.astype(jnp.float32))
              for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))), jnp.zeros((), jnp.float32))


def grad_agreement(updates_per_batch: int = 1) -> optax.GradientTransformation:
  """Passes gradients through unchanged and records the cosine between successive batches' gradients.

  For two independent rollout batches whose gradients are ``g = μ + noise`` (per-batch noise
  covariance Σ), ``E[cos] ≈ |μ|² / (|μ|² + tr Σ)``: near 0 when the update is noise-dominated, so
  ``snr = cos / (1 − cos)`` estimates the gradient signal-to-noise ratio of one batch. Only the first
  update on each batch is compared (the μ inner updates of one batch share its data).

  Args:
    updates_per_batch: μ, optimizer updates per rollout batch.
  Returns:
    An optax transformation whose state is a :class:`GradAgreementState` (one params-sized buffer).
  """

  def init(params: Any) -> GradAgreementState:
    return GradAgreementState(prev=jax.tree.map(jnp.zeros_like, params), count=jnp.zeros((), jnp.int32),
                              cos=jnp.zeros((), jnp.float32))

  def update(updates: Any, state: GradAgreementState, params: Any = None):
    del params
    first = state.count % updates_per_batch == 0
    dot = _tree_dot(updates, state.prev)
    norms = jnp.sqrt(_tree_dot(updates, updates) * _tree_dot(state.prev, state.prev))
    cos = jnp.where((state.count >= updates_per_batch) & (norms > 0), dot / jnp.maximum(norms, 1e-30), 0.0)
    prev = jax.tree.map(lambda g, p: jnp.where(first, g.astype(p.dtype), p), updates, state.prev)
    return updates, GradAgreementState(prev=prev, count=state.count + 1,
                                       cos=jnp.where(first, cos, state.cos))

  return optax.GradientTransformation(init, update)


def read_grad_agreement(opt_state: Any) -> jax.Array | None:
  """The latest cosine recorded by :func:`grad_agreement` anywhere in ``opt_state``, or None."""
  found = [s for s in jax.tree.leaves(opt_state, is_leaf=lambda x: isinstance(x, GradAgreementState))
           if isinstance(s, GradAgreementState)]
  return found[0].cos if found else None


def make_optimizer(learning_rate: float, warmup_steps: int, weight_decay: float, max_grad_norm: float,
                   decay_steps: int = 0, eps: float = 1e-8, b1: float = 0.9, b2: float = 0.999,
                   agreement_every: int = 0) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """``clip_by_global_norm -> adamw`` with a linear warmup to ``learning_rate``.

  The schedule is indexed by the optimizer update count from 0. With ``warmup_steps = W > 0`` the
  rate rises linearly from 0 at update 0 to the peak at update W (transformers' convention); with
  ``W = 0`` update 0 already runs at the peak.

  Args:
    eps: Adam's epsilon; a larger value damps the steps of parameters whose gradients are tiny
      (sparse-reward RL batches), instead of normalising noise to full-size steps.
    b1, b2: Adam's moment decays (d1: 0.9, 0.99).
    decay_steps: if > 0, cosine decay to 10% of the peak over this many steps after warmup;
      otherwise the rate stays constant after warmup.
    agreement_every: if > 0, record the gradient agreement of successive batches
      (:func:`grad_agreement` with this many updates per batch) on the raw gradients.
  Returns:
    (optimizer, learning-rate schedule of the update count).
  """
  if decay_steps > 0 and warmup_steps > 0:
    schedule = optax.warmup_cosine_decay_schedule(0.0, learning_rate, warmup_steps, warmup_steps + decay_steps,
                                                  end_value=0.1 * learning_rate)
  elif decay_steps > 0:
    # No warmup: the first update runs at the peak rate (a one-step warmup from 0 would spend it at 0).
    schedule = optax.cosine_decay_schedule(learning_rate, decay_steps, alpha=0.1)
  elif warmup_steps > 0:
    schedule = optax.join_schedules(
        [optax.linear_schedule(0.0, learning_rate, warmup_steps), optax.constant_schedule(learning_rate)],
        [warmup_steps])
  else:
    schedule = optax.constant_schedule(learning_rate)
  parts = [grad_agreement(agreement_every)] if agreement_every > 0 else []
  opt = optax.chain(*parts,
                    optax.clip_by_global_norm(max_grad_norm) if max_grad_norm > 0 else optax.identity(),
                    optax.adamw(schedule, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay))
  return opt, schedule
