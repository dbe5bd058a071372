"""GRPO learner for masked diffusion LMs, generic over objective, credit and likelihood.

One iteration: rollout (jit) → rewards on the host → credit weights (once per rollout) → sequence
advantages (``rl.advantage``, once per rollout batch; REINFORCE++'s, which read the KL under each
update's likelihood masks, once per inner update) → μ inner iterations, each with a new likelihood
key whose masks are shared by θ, θ_old and θ_ref; θ_old is the policy that produced the rollout.
All μ updates run in one jitted ``lax.scan``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from daca_jax import parallel
from daca_jax.credit import CREDIT, TAGGERS, CreditInputs, CreditOutput, group_agreement_mask
from daca_jax.credit.base import RECORDS
from daca_jax.contracts import (TokenScores, Trajectory, as_model_fns, check_optional_shape, check_shape,
                                check_trajectory, objective_inputs)
from daca_jax.diffusion.rollout import make_rollout_fn
from daca_jax.errors import ConfigError
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.rl.advantages import ADVANTAGES, advantage_name, zero_std_group_fraction
from daca_jax.rl.objectives import OBJECTIVES, TOKEN_ADVANTAGE_OBJECTIVES, PolicyBatch
from daca_jax.rl.optim import make_optimizer, read_grad_agreement
from daca_jax.types import TrainConfig


class GRPOLearner:
  """Rollout, credit and update functions of one configured method.

  Args:
    logits_fn: pure ``(params, tokens[B, T]) -> logits[B, T, V]``, or a
      :class:`~daca_jax.contracts.ModelFns` (``daca_jax.models.make_logits_fn``).
    cfg: validated :class:`TrainConfig` (uses ``rollout``, ``credit``, ``likelihood``, ``rl``).
    mask_id: ``[MASK]`` id; eos_id: EOS id.
    tokenizer: the task's tokenizer; needed by credit assigners that tag tokens (``dtca``).
    hidden_logits_fn: the same model returning ``(logits, hidden)``
      (``make_logits_fn(graphdef, return_hidden=True)``); needed by ``delta``, whose rollout
      records each token's hidden state at its commit step.
    optimizer_wrapper: wraps the configured optimizer (e.g. :func:`daca_jax.models.lora.lora_optimizer`,
      which freezes the base and keeps optimizer state for the adapters only).
    extra_records: trajectory records to keep beyond what the configured credit needs (``"step_conf"``,
      ``"step_entropy"``, ``"commit_hidden"``), e.g. for :mod:`daca_jax.viz`, which draws other
      assigners' weights from the same rollout. Recording changes neither the sampled tokens nor the
      number of model calls.

  Raises:
    ConfigError: the configured credit assigner needs a tokenizer or hidden states that were not
      given.
  """

  def __init__(self, logits_fn: Callable[..., jax.Array], cfg: TrainConfig, *, mask_id: int, eos_id: int,
               tokenizer: Any = None, hidden_logits_fn: Callable[..., Any] | None = None,
               optimizer_wrapper: Callable[[optax.GradientTransformation], optax.GradientTransformation]
               | None = None, extra_records: frozenset[str] | set[str] | tuple[str, ...] = ()):
    if cfg.likelihood.trajectory_steps == 0:  # trajectory / rldf rebuild the rollout's own steps
      cfg = dataclasses.replace(cfg, likelihood=dataclasses.replace(cfg.likelihood,
                                                                    trajectory_steps=cfg.rollout.steps))
    self.cfg = cfg
    logits_fn = as_model_fns(logits_fn)
    hidden_logits_fn = None if hidden_logits_fn is None else as_model_fns(hidden_logits_fn, "hidden_logits_fn")
    self.logits_fn = logits_fn
    self.mask_id = mask_id
    self.credit = CREDIT.get(cfg.rl.credit)
    # under parallel.strategy="pmap" each device scores its own rows (daca_jax.parallel)
    self.likelihood = parallel.wrap_likelihood(LIKELIHOOD.get(cfg.rl.likelihood), cfg.parallel)
    self.objective = OBJECTIVES.get(cfg.rl.objective)
    self.advantage = ADVANTAGES.get(advantage_name(cfg.rl.objective, cfg.rl.advantage, cfg.rl.normalize_adv_std))
    # Credit assigners that read advantages (delta, position_value) run before any update pass, so an
    # estimator that needs the update's KL hands them the group advantages instead.
    self._credit_advantage = (ADVANTAGES.get(advantage_name("", "", cfg.rl.normalize_adv_std))
                              if self.advantage.needs_kl else self.advantage)
    if self.credit.token_level and cfg.rl.objective not in TOKEN_ADVANTAGE_OBJECTIVES:
      raise ConfigError("rl.credit", cfg.rl.credit, "a sequence-level credit with rl.objective="
                        f"{cfg.rl.objective!r} (per-token advantages need one of "
                        f"{sorted(TOKEN_ADVANTAGE_OBJECTIVES)})")
    self.optimizer, self.schedule = make_optimizer(cfg.rl.learning_rate, cfg.rl.warmup_steps,
                                                   cfg.rl.weight_decay, cfg.rl.max_grad_norm,
                                                   eps=cfg.rl.adam_eps,
                                                   agreement_every=cfg.rl.num_iterations
                                                   if cfg.rl.grad_agreement else 0)
    if optimizer_wrapper is not None:
      self.optimizer = optimizer_wrapper(self.optimizer)
    records = frozenset(self.credit.records(cfg.credit)) | frozenset(extra_records)
    unknown = sorted(records - set(RECORDS))
    if unknown:
      raise ValueError(f"extra_records {unknown} are not trajectory records (allowed: {list(RECORDS)})")
    rollout_logits_fn = logits_fn
    if "commit_hidden" in records:
      if hidden_logits_fn is None:
        raise ConfigError("rl.credit", cfg.rl.credit, "an assigner whose inputs this learner has: "
                          f"{cfg.rl.credit!r} (or extra_records) needs hidden states (pass hidden_logits_fn)")
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
                     state: Any, token_rewards: tuple[jax.Array, jax.Array] | None) -> CreditOutput:
    adv = self._credit_advantage(rewards, self.cfg.rl.group_size) if self.credit.needs_advantages else None
    tok, tok_mask = token_rewards if token_rewards is not None else (None, None)
    inputs = CreditInputs(advantages=adv, categories=categories, state=state, token_rewards=tok,
                          token_reward_mask=tok_mask, group_size=self.cfg.rl.group_size)
    out = self.credit.assign(traj, self.cfg.credit, self.cfg.rollout, inputs)
    if self.cfg.credit.drop_agreed:
      keep = group_agreement_mask(traj.completion, traj.completion_mask, self.cfg.rl.group_size)
      agreed = 1.0 - jnp.sum(keep) / jnp.maximum(jnp.sum(traj.completion_mask), 1.0)
      out = out.replace(weights=out.weights * keep,
                        token_advantages=None if out.token_advantages is None else out.token_advantages * keep,
                        metrics=dict(out.metrics, agreed_fraction=agreed))
    return out

  def assign_credit(self, traj: Trajectory, rewards: jax.Array, state: Any = None,
                    token_rewards: tuple[Any, Any] | None = None) -> CreditOutput:
    """Credit weights of one rollout batch (tags tokens on the host when the assigner needs it).

    Args:
      traj: the rollout.
      rewards: float32 [B] rewards, groups of G adjacent.
      state: the assigner's state (from :meth:`init_credit_state` or the previous call).
      token_rewards: (rewards float32 [B, L], mask float32 [B, L]) from the task's
        ``token_rewards``; required by assigners with ``needs_token_rewards``.
    Returns:
      :class:`CreditOutput`: weights float32 [B, L], next state, metrics (and token advantages
      for token-reward credit).
    Raises:
      ShapeError: ``traj`` disagrees with ``rollout`` config, ``rewards`` is not ``[B]`` or a token
        reward array is not ``[B, L]``.
    """
    b, length = self._check_rollout_batch(traj, rewards)
    if token_rewards is not None:
      for name, x in zip(("token_rewards[0] (rewards)", "token_rewards[1] (mask)"), token_rewards):
        check_shape(name, x, (b, length), "[B, L] like the trajectory's completion")
    categories = None
    if self.tagger is not None:  # on the host: every row, placed like the completions
      categories = np.asarray(self.tagger.tag(parallel.to_host(traj.completion)), np.int32)
      categories = jnp.asarray(parallel.to_global(categories, None, traj.completion.sharding))
    if token_rewards is not None:
      token_rewards = tuple(jnp.asarray(x, jnp.float32) for x in token_rewards)
    return self._assign(traj, jnp.asarray(rewards, jnp.float32), categories, state, token_rewards)

  def advantages(self, rewards: jax.Array) -> jax.Array | None:
    """float32 [B] sequence advantages of the configured estimator (``rl.advantage``), or None when it
    reads the KL of an update's likelihood pass (REINFORCE++: computed inside each update)."""
    if self.advantage.needs_kl:
      return None
    return self.advantage(rewards, self.cfg.rl.group_size)

  def _check_rollout_batch(self, traj: Trajectory, rewards: Any, weights: Any = None) -> tuple[int, int]:
    """Trace-time checks of one rollout batch: the trajectory against ``cfg.rollout``, rewards
    ``[B]``, weights ``[B, L]`` (or a pair of them). Returns (B, L)."""
    b, length = check_trajectory(traj, self.cfg.rollout, cfg_name="rollout")
    check_shape("rewards", rewards, (b,), "[B]: one reward per sequence")
    if weights is not None:
      pair = weights if isinstance(weights, tuple) else (weights, None)
      check_shape("weights", pair[0], (b, length), "[B, L] credit weights")
      check_optional_shape("weights[1] (token advantages)", pair[1], (b, length), "[B, L]")
    return b, length

  def logprobs(self, params: Any, traj_tokens: jax.Array, prompt_len: int, key: jax.Array,
               commit_step: jax.Array | None = None, *, commit_conf: jax.Array | None = None,
               completion_mask: jax.Array | None = None) -> TokenScores:
    """The configured estimator's :class:`~daca_jax.contracts.TokenScores` under ``params`` and
    ``key`` (every estimator takes the same rows and ignores those it does not read)."""
    return self.likelihood(self.logits_fn, params, traj_tokens, prompt_len, key, self.cfg.likelihood,
                           mask_id=self.mask_id, commit_step=commit_step, commit_conf=commit_conf,
                           completion_mask=completion_mask)

  def objective_grad(self, params: Any, ref_params: Any, traj: Trajectory, rewards: jax.Array,
                     weights: Any, key: jax.Array, old_params: Any = None,
                     advantages: jax.Array | None = None) -> tuple[Any, dict[str, jax.Array]]:
    """Gradient of the configured objective for one rollout batch under one likelihood key.

    This is the direction every update step takes (before the optimizer), exposed so that studies
    can compare it with the true policy gradient (:mod:`daca_jax.gradient_study`).

    Args:
      params: θ at which the loss is differentiated.
      ref_params: θ_ref of the KL term.
      traj: the rollout; rewards: float32 [B]; weights: as in :meth:`_update`.
      key: the likelihood key (its masks are shared by θ, θ_old and θ_ref).
      old_params: θ_old, the rollout policy; None means θ_old = θ (the first inner update, where
        logp_old is θ's own stop-gradient log-prob and needs no extra pass).
      advantages: float32 [B] from :meth:`advantages` (computed once per rollout batch by the update);
        None computes them here (and, for an estimator that reads the KL, always here: from this
        pass's logp_old and logp_ref).
    Returns:
      (grads, aux): the gradient of the loss (a descent direction: the update moves along −grads)
      and the objective's metrics with ``loss``.
    Raises:
      ShapeError: ``traj`` disagrees with the ``rollout`` config, or ``rewards`` / ``weights`` have
        the wrong shape (at trace time).
    """
    self._check_rollout_batch(traj, rewards, weights)
    rl = self.cfg.rl
    weights, token_adv = weights if isinstance(weights, tuple) else (weights, None)
    p = traj.prompt_len
    adv = self.advantages(rewards) if advantages is None else advantages

    def logp_fn(prm):
      """(logp, mask, weights, commit_now, token advantages) of the objective: the estimator's targets
      (S contexts of L positions, mask and weights tiled; ELBO factors per ``likelihood.elbo_terms``)."""
      out = self.logprobs(prm, traj.tokens, p, key, traj.commit_step, commit_conf=traj.commit_conf,
                          completion_mask=traj.completion_mask)
      return objective_inputs(out, traj.completion_mask, weights, token_adv, self.cfg.likelihood.elbo_terms)

    logp_old = None if old_params is None else jax.lax.stop_gradient(logp_fn(old_params)[0])
    logp_ref = jax.lax.stop_gradient(logp_fn(ref_params)[0]) if rl.beta > 0 else None

    def loss_fn(prm):
      logp, mask, w, commit_now, tok_adv = logp_fn(prm)
      old = jax.lax.stop_gradient(logp) if logp_old is None else logp_old
      ref = old if logp_ref is None else logp_ref
      seq_adv = adv
      if seq_adv is None:  # REINFORCE++: the rollout policy's KL under this pass's masks
        seq_adv = self.advantage(rewards, rl.group_size, jnp.sum(mask * (old - ref), -1), rl.beta)
      batch = PolicyBatch(logp_old=old, logp_ref=ref, advantages=seq_adv, weights=w, mask=mask,
                          rewards=rewards, commit_now=commit_now, token_advantages=tok_adv)
      loss, aux = self.objective(logp, batch, rl)
      if adv is None:
        aux = dict(aux, adv_std=jnp.std(seq_adv))
      return loss, aux

    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    return grads, dict(aux, loss=loss)

  def _update(self, params: Any, opt_state: optax.OptState, ref_params: Any, traj: Trajectory,
              rewards: jax.Array, weights: Any, key: jax.Array):
    """μ policy updates on one rollout batch.

    Args:
      params: θ, which is also θ_old (the rollout policy) at entry.
      opt_state: optimizer state.
      ref_params: frozen reference policy θ_ref.
      traj: the rollout (tokens [B, P+L], completion_mask [B, L], commit_step [B, L]).
      rewards: float32 [B], groups of G adjacent.
      weights: float32 [B, L] credit weights, or a pair (weights, token_advantages float32 [B, L])
        from a token-reward credit (``(credit.weights, credit.token_advantages)``).
      key: PRNG key; inner iteration j uses ``fold_in(key, j)``.
    Returns:
      (params, opt_state, metrics averaged over the μ iterations).
    """
    rl = self.cfg.rl
    old_params = params
    adv = self.advantages(rewards)  # once for the μ updates (None: computed in each, from its KL)

    def inner(carry, j, first: bool = False):
      params, opt_state = carry
      # At the first inner iteration θ = θ_old, so logp_old is the policy's own (stop-gradient)
      # log-prob under the same masks: no separate θ_old pass is needed.
      grads, aux = self.objective_grad(params, ref_params, traj, rewards, weights, jax.random.fold_in(key, j),
                                       old_params=None if first else old_params, advantages=adv)
      updates, opt_state = self.optimizer.update(grads, opt_state, params)
      params = optax.apply_updates(params, updates)
      return (params, opt_state), dict(aux, grad_norm=optax.tree.norm(grads))

    (params, opt_state), m0 = inner((params, opt_state), 0, first=True)
    ms = jax.tree.map(lambda x: x[None], m0)
    if rl.num_iterations > 1:
      (params, opt_state), rest = jax.lax.scan(inner, (params, opt_state),
                                               jnp.arange(1, rl.num_iterations, dtype=jnp.int32))
      ms = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), ms, rest)
    metrics = jax.tree.map(jnp.mean, ms)
    grad_cos = read_grad_agreement(opt_state)
    if grad_cos is not None:  # this batch's gradient vs the previous batch's (0 at the first)
      metrics["grad_cos"] = grad_cos
    if adv is not None:
      metrics["adv_std"] = jnp.std(adv)
    metrics["zero_std_groups"] = zero_std_group_fraction(rewards, rl.group_size)
    weights = weights[0] if isinstance(weights, tuple) else weights
    valid = traj.completion_mask
    metrics["weight_std"] = jnp.sqrt(jnp.sum(jnp.square(weights - 1.0) * valid) / jnp.maximum(jnp.sum(valid), 1.0))
    return params, opt_state, metrics
