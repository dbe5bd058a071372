"""GRPO learner for masked diffusion LMs (DESIGN §9), generic over objective, credit and likelihood.

One iteration: rollout (jit) → rewards on the host → group advantages → credit weights (once per
rollout) → μ inner iterations, each with a new likelihood key whose masks are shared by θ, θ_old and
θ_ref; θ_old is the policy that produced the rollout. All μ updates run in one jitted ``lax.scan``.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from daca_jax import parallel
from daca_jax.credit import CREDIT, TAGGERS, CreditInputs, CreditOutput
from daca_jax.diffusion.rollout import Trajectory, make_rollout_fn
from daca_jax.errors import ConfigError
from daca_jax.likelihood import LIKELIHOOD, StateTargets
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
    tokenizer: the task's tokenizer; needed by credit assigners that tag tokens (``dtca``).
    hidden_logits_fn: the same model returning ``(logits, hidden)``
      (``make_logits_fn(graphdef, return_hidden=True)``); needed by ``delta``, whose rollout
      records each token's hidden state at its commit step.
    optimizer_wrapper: wraps the configured optimizer (e.g. :func:`daca_jax.models.lora.lora_optimizer`,
      which freezes the base and keeps optimizer state for the adapters only).

  Raises:
    ConfigError: the configured credit assigner needs a tokenizer or hidden states that were not
      given.
  """

  def __init__(self, logits_fn: Callable[..., jax.Array], cfg: TrainConfig, *, mask_id: int, eos_id: int,
               tokenizer: Any = None, hidden_logits_fn: Callable[..., Any] | None = None,
               optimizer_wrapper: Callable[[optax.GradientTransformation], optax.GradientTransformation]
               | None = None):
    if cfg.likelihood.trajectory_steps == 0:  # trajectory / rldf rebuild the rollout's own steps
      cfg = dataclasses.replace(cfg, likelihood=dataclasses.replace(cfg.likelihood,
                                                                    trajectory_steps=cfg.rollout.steps))
    self.cfg = cfg
    self.logits_fn = logits_fn
    self.mask_id = mask_id
    self.credit = CREDIT.get(cfg.rl.credit)
    # under parallel.strategy="pmap" each device scores its own rows (daca_jax.parallel)
    self.likelihood = parallel.wrap_likelihood(LIKELIHOOD.get(cfg.rl.likelihood), cfg.parallel)
    self.objective = OBJECTIVES.get(cfg.rl.objective)
    self.optimizer, self.schedule = make_optimizer(cfg.rl.learning_rate, cfg.rl.warmup_steps,
                                                   cfg.rl.weight_decay, cfg.rl.max_grad_norm,
                                                   eps=cfg.rl.adam_eps)
    if optimizer_wrapper is not None:
      self.optimizer = optimizer_wrapper(self.optimizer)
    records = self.credit.records(cfg.credit)
    rollout_logits_fn = logits_fn
    if "commit_hidden" in records:
      if hidden_logits_fn is None:
        raise ConfigError("rl.credit", cfg.rl.credit, "an assigner whose inputs this learner has: "
                          f"{cfg.rl.credit!r} needs hidden states (pass hidden_logits_fn)")
      rollout_logits_fn = hidden_logits_fn
    self.tagger = None
    if self.credit.needs_categories:
      if tokenizer is None:
        raise ConfigError("rl.credit", cfg.rl.credit, "an assigner whose inputs this learner has: "
                          f"{cfg.rl.credit!r} tags tokens (pass the task's tokenizer)")
      self.tagger = TAGGERS.get(cfg.credit.tagger)(tokenizer)
    self.rollout = make_rollout_fn(rollout_logits_fn, cfg.rollout, mask_id=mask_id, eos_id=eos_id,
                                   record_step_conf="step_conf" in records,
                                   record_step_entropy="step_entropy" in records,
                                   record_commit_hidden="commit_hidden" in records)
    self._likelihood_kwargs = frozenset(inspect.signature(self.likelihood).parameters)
    self.credit_weights = jax.jit(lambda traj: self.credit(traj, cfg.credit, cfg.rollout))
    self._assign = jax.jit(self._assign_credit)
    self.rollout = parallel.shard_rollout(self.rollout, cfg.parallel)
    self.update = parallel.compile_update(self._update, cfg.parallel)

  def init_opt_state(self, params: Any) -> optax.OptState:
    return self.optimizer.init(params)

  def init_credit_state(self) -> Any:
    """The credit assigner's initial state, or None when it is stateless."""
    if self.credit.init_state is None:
      return None
    num_categories = self.tagger.num_categories if self.tagger is not None else 0
    return self.credit.init_state(self.cfg.credit, num_categories)

  def _assign_credit(self, traj: Trajectory, rewards: jax.Array, categories: jax.Array | None,
                     state: Any) -> CreditOutput:
    adv = group_advantages(rewards, self.cfg.rl.group_size, self.cfg.rl.normalize_adv_std)
    inputs = CreditInputs(advantages=adv, categories=categories, state=state)
    return self.credit.assign(traj, self.cfg.credit, self.cfg.rollout, inputs)

  def assign_credit(self, traj: Trajectory, rewards: jax.Array, state: Any = None) -> CreditOutput:
    """Credit weights of one rollout batch (tags tokens on the host when the assigner needs it).

    Args:
      traj: the rollout.
      rewards: float32 [B] rewards, groups of G adjacent.
      state: the assigner's state (from :meth:`init_credit_state` or the previous call).
    Returns:
      :class:`CreditOutput`: weights float32 [B, L], next state, metrics.
    """
    categories = None
    if self.tagger is not None:  # on the host: every row, placed like the completions
      categories = np.asarray(self.tagger.tag(parallel.to_host(traj.completion)), np.int32)
      categories = jnp.asarray(parallel.to_global(categories, None, traj.completion.sharding))
    return self._assign(traj, jnp.asarray(rewards, jnp.float32), categories, state)

  def logprobs(self, params: Any, traj_tokens: jax.Array, prompt_len: int, key: jax.Array,
               commit_step: jax.Array | None = None, *, commit_conf: jax.Array | None = None,
               completion_mask: jax.Array | None = None) -> Any:
    """Per-token log-probs [B, L] of the configured estimator under ``params`` and ``key``
    (a :class:`~daca_jax.likelihood.rldf.StateTargets` for estimators that rebuild states)."""
    extra = {name: value for name, value in (("commit_conf", commit_conf),
                                             ("completion_mask", completion_mask))
             if name in self._likelihood_kwargs}
    return self.likelihood(self.logits_fn, params, traj_tokens, prompt_len, key, self.cfg.likelihood,
                           mask_id=self.mask_id, commit_step=commit_step, **extra)

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

    def logp_fn(prm, k):
      """(logp, mask, weights, commit_now); estimators that rebuild k rollout states score
      (state, position) pairs, so mask and weights are tiled over the states."""
      out = self.logprobs(prm, traj.tokens, p, k, traj.commit_step, commit_conf=traj.commit_conf,
                          completion_mask=traj.completion_mask)
      if isinstance(out, StateTargets):
        reps = (1, out.num_states)
        return (out.logp, jnp.tile(traj.completion_mask, reps) * out.masked, jnp.tile(weights, reps),
                out.committed_here)
      return out, traj.completion_mask, weights, None

    def inner(carry, j, first: bool = False):
      params, opt_state = carry
      k = jax.random.fold_in(key, j)
      # At the first inner iteration θ = θ_old, so logp_old is the policy's own (stop-gradient)
      # log-prob under the same masks: no separate θ_old pass is needed.
      logp_old = None if first else jax.lax.stop_gradient(logp_fn(old_params, k)[0])
      logp_ref = jax.lax.stop_gradient(logp_fn(ref_params, k)[0]) if rl.beta > 0 else None

      def loss_fn(prm):
        logp, mask, w, commit_now = logp_fn(prm, k)
        old = jax.lax.stop_gradient(logp) if first else logp_old
        batch = PolicyBatch(logp_old=old, logp_ref=old if logp_ref is None else logp_ref,
                            advantages=adv, weights=w, mask=mask, rewards=rewards,
                            commit_now=commit_now)
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
