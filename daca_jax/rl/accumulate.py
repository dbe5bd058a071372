"""Gradient accumulation (``rl.grad_accum``): one update's gradient from micro-batches of the rollout
batch, equal to the gradient of the whole batch.

What makes it exact. An objective sees the whole batch's per-token log-probs ``logp [B, L']`` and
stop-gradient fields (θ_old's and θ_ref's log-probs, advantages, weights, masks); its normalisers —
token counts, the number of groups or rows, group and batch-whitened advantages, REINFORCE++'s
KL-shaped whitening — span the whole batch. Every registered objective is *row-local*: the derivative
of its loss with respect to row r of ``logp`` depends on the other rows only through those
stop-gradient fields, never through their ``logp``. So micro-batch k's share of the gradient is the
gradient of the whole-batch loss in which rows of k carry the policy's live log-probs and every other
row a constant, and the shares sum to the whole batch's gradient. Nothing is normalised per
micro-batch, and groups stay whole (``rl.prompts_per_step`` is a multiple of ``rl.grad_accum``).

Passes, for each inner update (one likelihood key), each a ``lax.map`` / ``lax.scan`` over the M
micro-batches inside the compiled update (the activations of one micro-batch live at a time):

1. the constant log-probs of the whole batch: θ_old's (at the first inner update θ_old = θ) and
   θ_ref's (β > 0). θ_old's also give the target masks and ELBO factors, which do not depend on the
   parameters. The advantages (REINFORCE++'s from these log-probs) are computed on the whole batch.
2. the gradient: micro-batch k's loss as above (the other rows' log-probs are θ_old's), its gradient
   (with respect to the trainable part of the parameters only: LoRA's adapters) summed in float32.
3. the metrics: the objective's aux on the whole batch's live log-probs collected in pass 2.

Why θ_old's pass also at the first inner update, where a one-batch update reads θ_old = θ's log-probs
off its own gradient pass: an objective's stop-gradient fields must hold the whole batch before any
micro-batch's gradient (RLDF's clean-state clip drops targets by θ_old's probability and normalises by
the kept count; REINFORCE++ whitens θ_old's KL). Cost against ``grad_accum = 1``: that one
no-gradient pass per rollout batch (1 forward in ~5 per inner update at μ = 1; negligible at d1's μ = 12).

Randomness: the estimator draws each row's masks from ``fold_in(key, row)`` with ``row`` its index in
the whole batch (:func:`daca_jax.parallel.per_sequence_keys`, as under ``parallel.strategy="pmap"``),
so the masks, and the update, do not depend on ``grad_accum`` or the device count; they differ (in
value, not distribution) from a one-device ``grad_accum = 1`` update, which draws them for the batch
at once.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from daca_jax.config.train import TrainConfig
from daca_jax.contracts import ParamSplit, PolicyBatch, TokenScores, Trajectory, objective_inputs, objective_states
from daca_jax.errors import ConfigError
from daca_jax.parallel.mesh import BATCH_AXES
from daca_jax.rl.advantages import AdvantageEstimator
from daca_jax.rl.methods import scored_positions

# (params, micro-batch trajectory, key, row_offset) -> TokenScores of those rows
RowScoresFn = Callable[[Any, Trajectory, jax.Array, jax.Array], TokenScores]


def micro_batches(traj: Trajectory, num: int, strategy: str = "none") -> Trajectory:
  """The rows an estimator reads (tokens, completion mask, commit steps and confidences), as ``num``
  contiguous micro-batches: leaves ``[num, B/num, ...]``; the step records are dropped.

  Under ``parallel.strategy="fsdp"`` every micro-batch is split over the batch devices (one
  all-to-all of these small int/float rows), so each device scores its share of every micro-batch.
  """
  b = traj.tokens.shape[0]
  stack = lambda x: x.reshape(num, b // num, *x.shape[1:])
  if strategy == "fsdp":
    place = lambda x: jax.lax.with_sharding_constraint(stack(x), P(None, BATCH_AXES))
  else:
    place = stack
  return Trajectory(tokens=place(traj.tokens), completion_mask=place(traj.completion_mask),
                    commit_step=place(traj.commit_step), commit_conf=place(traj.commit_conf),
                    prompt_len=traj.prompt_len, mask_id=traj.mask_id)


def _rows(x: jax.Array) -> jax.Array:
  """``[M, b, ...]`` stacked per-micro-batch results -> ``[M·b, ...]`` in batch order."""
  return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def make_accumulated_grad(scores_fn: RowScoresFn, objective: Callable[..., Any], advantage: AdvantageEstimator,
                          cfg: TrainConfig, param_split: ParamSplit | None = None,
                          passes: tuple[Callable[..., Any], int] | None = None) -> Callable[..., Any]:
  """``grad(params, ref_params, traj, rewards, weights, token_adv, key, old_params=None, advantages=None)
  -> (grads, aux)`` over ``cfg.rl.grad_accum`` micro-batches (module docstring), with the arguments and
  results of :func:`daca_jax.rl.update.make_objective_grad`'s (its ``weights`` split into ``weights``
  and ``token_adv``, the token advantages or None; the caller checks shapes). ``key`` is one key for every
  micro-batch, or ``grad_accum`` keys stacked on a leading axis, one per micro-batch
  (:func:`daca_jax.rl.update.inner_update_key` under ``rl.mask_seed_reuse``).

  Args:
    scores_fn: the configured estimator on a micro-batch whose first row is row ``row_offset`` of the
      whole batch, drawing per row (:func:`daca_jax.parallel.per_sequence_keys`).
    objective: ``OBJECTIVES[rl.objective]`` (row-local, module docstring).
    advantage: ``ADVANTAGES[...]`` of the configuration.
    cfg: the validated config (``rl``, ``likelihood.elbo_terms``, ``parallel.strategy``).
    param_split: the trainable part of the parameters (LoRA: the adapters): gradients are taken and
      accumulated for it only; the rest of the returned tree is zeros, as the frozen base's gradient
      of a one-batch update.
    passes: ``(pass_scores, S)`` with ``rl.pass_accum``: ``pass_scores(params, micro-batch, key,
      row_offset, j) -> (TokenScores, here)`` the per-pass form drawing per row; each micro-batch's
      gradient is then accumulated one pass at a time (:mod:`daca_jax.rl.pass_accum`), the other
      passes and rows holding θ_old's log-probs.
  """
  rl = cfg.rl
  num = rl.grad_accum
  elbo_terms = cfg.likelihood.elbo_terms
  trainable = param_split.trainable if param_split is not None else (lambda p: p)
  replace = param_split.replace if param_split is not None else (lambda p, t: t)

  def grad(params: Any, ref_params: Any, traj: Trajectory, rewards: jax.Array, weights: jax.Array,
           token_adv: jax.Array | None, key: jax.Array, old_params: Any = None,
           advantages: jax.Array | None = None) -> tuple[Any, dict[str, jax.Array]]:
    b = traj.tokens.shape[0] // num
    parts = micro_batches(traj, num, cfg.parallel.strategy)
    index = jnp.arange(num, dtype=jnp.int32)
    # One key for every micro-batch, or one per micro-batch stacked on a leading axis (make_update under
    # rl.mask_seed_reuse: the references' seed of each micro-batch); told apart by shape, statically.
    typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    key_of = (lambda k: key[k]) if key.ndim == (1 if typed else 2) else (lambda k: key)

    def logp_of(scores: TokenScores, completion_mask: jax.Array) -> jax.Array:
      return objective_inputs(scores, completion_mask, completion_mask, None, elbo_terms)[0]

    def sweep(prm: Any) -> TokenScores:
      """The whole batch's scores under ``prm``, a micro-batch at a time, no gradient."""
      out = jax.lax.map(lambda kp: scores_fn(prm, kp[1], key_of(kp[0]), kp[0] * b), (index, parts))
      return jax.lax.stop_gradient(jax.tree.map(_rows, out))

    old_scores = sweep(params if old_params is None else old_params)
    _, mask, w, commit_now, tok = objective_inputs(old_scores, *scored_positions(cfg, traj.completion_mask, weights),
                                                   token_adv, elbo_terms)
    logp_old = logp_of(old_scores, traj.completion_mask)
    logp_ref = logp_of(sweep(ref_params), traj.completion_mask) if rl.beta > 0 else logp_old
    adv = advantages
    if adv is None and advantage.needs_kl:  # REINFORCE++: the rollout policy's KL under these masks
      adv = advantage(rewards, rl.group_size, jnp.sum(mask * (logp_old - logp_ref), -1), rl.beta)
    elif adv is None:
      adv = advantage(rewards, rl.group_size)
    batch = PolicyBatch(logp_old=logp_old, logp_ref=logp_ref, advantages=adv, weights=w, mask=mask,
                        rewards=rewards, commit_now=commit_now, token_advantages=tok,
                        completion_mask=traj.completion_mask,
                        num_states=objective_states(old_scores, elbo_terms))
    filler = logp_old.reshape(num, b, -1)  # the constant log-probs of the rows outside a micro-batch

    def step(acc: Any, kp: tuple[jax.Array, Trajectory]) -> tuple[Any, jax.Array]:
      k, part = kp
      if passes is not None:
        return pass_step(acc, k, part)

      def loss(t: Any) -> tuple[jax.Array, jax.Array]:
        live = logp_of(scores_fn(replace(params, t), part, key_of(k), k * b), part.completion_mask)
        return objective(_rows(filler.at[k].set(live)), batch, rl)[0], live

      (_, live), g = jax.value_and_grad(loss, has_aux=True)(trainable(params))
      return jax.tree.map(lambda a, x: a + x.astype(jnp.float32), acc, g), live

    def pass_step(acc: Any, k: jax.Array, part: Trajectory) -> tuple[Any, jax.Array]:
      """Micro-batch k's gradient one pass at a time; its live log-probs, assembled over the passes."""
      pass_scores, num_passes = passes

      def one(carry, j):
        acc, live_sum = carry

        def loss(t: Any) -> tuple[jax.Array, jax.Array]:
          scores, here = pass_scores(replace(params, t), part, key_of(k), k * b, j)
          lp = logp_of(scores, part.completion_mask)
          live = jnp.where(here, lp, filler[k])
          return objective(_rows(filler.at[k].set(live)), batch, rl)[0], jnp.where(here, lp, 0.0)

        (_, own), g = jax.value_and_grad(loss, has_aux=True)(trainable(params))
        return (jax.tree.map(lambda a, x: a + x.astype(jnp.float32), acc, g), live_sum + own), None

      (acc, live), _ = jax.lax.scan(one, (acc, jnp.zeros_like(filler[k])), jnp.arange(num_passes, dtype=jnp.int32))
      return acc, live

    zeros = jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), trainable(params))
    acc, live = jax.lax.scan(step, zeros, (index, parts))
    value, aux = objective(_rows(live), batch, rl)
    if advantages is None and advantage.needs_kl:
      aux = dict(aux, adv_std=jnp.std(adv))
    grads_t = jax.tree.map(lambda a, x: a.astype(x.dtype), acc, trainable(params))
    grads = replace(jax.tree.map(jnp.zeros_like, params), grads_t)
    return grads, dict(aux, loss=value)

  return grad


def check_grad_accum(batch: int, grad_accum: int, group_size: int, shards: int = 1) -> None:
  """Raises ConfigError unless ``batch`` rows split into ``grad_accum`` micro-batches of whole groups,
  each split evenly over ``shards`` batch devices."""
  if batch % grad_accum or (batch // grad_accum) % group_size:
    raise ConfigError("rl.grad_accum", grad_accum, f"a divisor of the {batch // group_size} groups of a batch "
                      f"(micro-batches of whole groups of rl.group_size={group_size})")
  if (batch // grad_accum) % shards:
    raise ConfigError("rl.grad_accum", grad_accum,
                      f"a value that leaves micro-batches of a multiple of the {shards} batch shards "
                      f"(rl.prompts_per_step * rl.group_size = {batch} rows / {grad_accum} "
                      f"= {batch / grad_accum:g})")


__all__ = ["check_grad_accum", "make_accumulated_grad", "micro_batches"]
