"""GRPO learner for masked diffusion LMs (DESIGN §9), generic over objective, credit and likelihood.

One iteration: rollout (jit) → rewards on the host → group advantages → credit weights (once per
rollout) → μ inner iterations, each with a new likelihood key whose masks are shared by θ, θ_old and
θ_ref; θ_old is the policy that produced the rollout. All μ updates run in one jitted ``lax.scan``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from daca_jax.credit import CREDIT
from daca_jax.diffusion.rollout import Trajectory, make_rollout_fn
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.rl.advantages import group_advantages, zero_std_group_fraction
from daca_jax.rl.objectives import OBJECTIVES, PolicyBatch
from daca_jax.rl.optim import make_optimizer
from daca_jax.types import TrainConfig


class GRPOLearner:
  """Rollout, credit and update functions of one configured method.

  Args:
    logits_fn: pure ``(params, tokens[B, T]) -> logits[B, T, V]``.
    cfg: validated :class:`TrainConfig` (uses ``rollout``, ``credit``, ``likelihood``, ``rl``).
    mask_id: ``[MASK]`` id; eos_id: EOS id.
  """

  def __init__(self, logits_fn: Callable[..., jax.Array], cfg: TrainConfig, *, mask_id: int, eos_id: int):
    if cfg.likelihood.trajectory_steps == 0:  # the trajectory estimator rebuilds every rollout step
      cfg = dataclasses.replace(cfg, likelihood=dataclasses.replace(cfg.likelihood,
                                                                    trajectory_steps=cfg.rollout.steps))
    self.cfg = cfg
    self.logits_fn = logits_fn
    self.mask_id = mask_id
    self.credit = CREDIT.get(cfg.rl.credit)
    self.likelihood = LIKELIHOOD.get(cfg.rl.likelihood)
    self.objective = OBJECTIVES.get(cfg.rl.objective)
    self.optimizer, self.schedule = make_optimizer(cfg.rl.learning_rate, cfg.rl.warmup_steps,
                                                   cfg.rl.weight_decay, cfg.rl.max_grad_norm,
                                                   eps=cfg.rl.adam_eps)
    need_conf, need_entropy = self.credit.records(cfg.credit)
    self.rollout = make_rollout_fn(logits_fn, cfg.rollout, mask_id=mask_id, eos_id=eos_id,
                                   record_step_conf=need_conf, record_step_entropy=need_entropy)
    self.credit_weights = jax.jit(lambda traj: self.credit(traj, cfg.credit, cfg.rollout))
    self.update = jax.jit(self._update)

  def init_opt_state(self, params: Any) -> optax.OptState:
    return self.optimizer.init(params)

  def logprobs(self, params: Any, traj_tokens: jax.Array, prompt_len: int, key: jax.Array,
               commit_step: jax.Array | None = None) -> jax.Array:
    """Per-token log-probs [B, L] of the configured estimator under ``params`` and ``key``."""
    return self.likelihood(self.logits_fn, params, traj_tokens, prompt_len, key, self.cfg.likelihood,
                           mask_id=self.mask_id, commit_step=commit_step)

  def _update(self, params: Any, opt_state: optax.OptState, ref_params: Any, traj: Trajectory,
              rewards: jax.Array, weights: jax.Array, key: jax.Array):
    """μ policy updates on one rollout batch.

    Args:
      params: θ, which is also θ_old (the rollout policy) at entry.
      opt_state: optimizer state.
      ref_params: frozen reference policy θ_ref.
      traj: the rollout (tokens [B, P+L], completion_mask [B, L], commit_step [B, L]).
      rewards: float32 [B], groups of G adjacent.
      weights: float32 [B, L] credit weights.
      key: PRNG key; inner iteration j uses ``fold_in(key, j)``.
    Returns:
      (params, opt_state, metrics averaged over the μ iterations).
    """
    rl = self.cfg.rl
    old_params = params
    p = traj.prompt_len
    adv = group_advantages(rewards, rl.group_size, rl.normalize_adv_std)
    logp_fn = lambda prm, k: self.logprobs(prm, traj.tokens, p, k, traj.commit_step)

    def inner(carry, j, first: bool = False):
      params, opt_state = carry
      k = jax.random.fold_in(key, j)
      # At the first inner iteration θ = θ_old, so logp_old is the policy's own (stop-gradient)
      # log-prob under the same masks: no separate θ_old pass is needed.
      logp_old = None if first else jax.lax.stop_gradient(logp_fn(old_params, k))
      logp_ref = jax.lax.stop_gradient(logp_fn(ref_params, k)) if rl.beta > 0 else None

      def loss_fn(prm):
        logp = logp_fn(prm, k)
        old = jax.lax.stop_gradient(logp) if first else logp_old
        batch = PolicyBatch(logp_old=old, logp_ref=old if logp_ref is None else logp_ref,
                            advantages=adv, weights=weights, mask=traj.completion_mask,
                            rewards=rewards)
        return self.objective(logp, batch, rl)

      (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
      updates, opt_state = self.optimizer.update(grads, opt_state, params)
      params = optax.apply_updates(params, updates)
      metrics = dict(aux, loss=loss, grad_norm=optax.tree.norm(grads))
      return (params, opt_state), metrics

    (params, opt_state), m0 = inner((params, opt_state), 0, first=True)
    ms = jax.tree.map(lambda x: x[None], m0)
    if rl.num_iterations > 1:
      (params, opt_state), rest = jax.lax.scan(inner, (params, opt_state),
                                               jnp.arange(1, rl.num_iterations, dtype=jnp.int32))
      ms = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), ms, rest)
    metrics = jax.tree.map(jnp.mean, ms)
    metrics["adv_std"] = jnp.std(adv)
    metrics["zero_std_groups"] = zero_std_group_fraction(rewards, rl.group_size)
    valid = traj.completion_mask
    metrics["weight_std"] = jnp.sqrt(jnp.sum(jnp.square(weights - 1.0) * valid) / jnp.maximum(jnp.sum(valid), 1.0))
    return params, opt_state, metrics
