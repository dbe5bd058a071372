"""Pure update-step factories: a configured method's gradient and its μ inner updates as functions.

``make_objective_grad(logits_fn, cfg, mask_id=...)`` and ``make_update(logits_fn, cfg, optimizer,
mask_id=...)`` return pure functions of arrays (jit-able, no state besides their arguments), in the
style of purejaxrl / tunix: a user's own loop can call them without :class:`~daca_jax.rl.learner.GRPOLearner`,
which builds its ``objective_grad`` and ``update`` from them. The configured pieces are looked up in
their registries once (``rl.likelihood`` → ``LIKELIHOOD``, ``rl.objective`` → ``OBJECTIVES``,
``rl.advantage`` → ``ADVANTAGES``); an unknown name is a one-line :class:`~daca_jax.errors.ConfigError`.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from daca_jax import parallel
from daca_jax.config.train import TrainConfig
from daca_jax.contracts import (ParamSplit, PolicyBatch, TokenScores, Trajectory, as_model_fns,
                                check_optional_shape, check_shape, check_trajectory, objective_inputs,
                                objective_states)
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.likelihood.base import LikelihoodFn
from daca_jax.rl.accumulate import check_grad_accum, make_accumulated_grad
from daca_jax.rl.methods import scored_positions
from daca_jax.rl.advantages import ADVANTAGES, advantage_name, zero_std_group_fraction
from daca_jax.rl.methods import OBJECTIVES
from daca_jax.rl.optim import read_grad_agreement
from daca_jax.rl.pass_accum import make_pass_accumulated_grad

# Folded into a likelihood key for the model's own training noise (ModelFns.train: LoRA dropout).
_TRAIN_NOISE_STREAM = 0x4C6F5241
# (params, ref_params, traj, rewards, weights, key, old_params=None, advantages=None) -> (grads, aux)
ObjectiveGradFn = Callable[..., tuple[Any, dict[str, jax.Array]]]
# (params, opt_state, ref_params, traj, rewards, weights, key) -> (params, opt_state, metrics)
UpdateFn = Callable[..., tuple[Any, optax.OptState, dict[str, jax.Array]]]


def with_trajectory_steps(cfg: TrainConfig) -> TrainConfig:
  """``cfg`` with ``likelihood.trajectory_steps`` = ``rollout.steps`` when unset (0): the trajectory and
  RLDF estimators rebuild the rollout's own steps; and ``likelihood.spg_block.block_length`` =
  ``rollout.block_length`` when unset (0): SPG masks the rollout's blocks."""
  lik = cfg.likelihood
  if not lik.spg_block.block_length:
    lik = dataclasses.replace(lik, spg_block=dataclasses.replace(lik.spg_block, block_length=cfg.rollout.block_length))
  if not lik.trajectory_steps:
    lik = dataclasses.replace(lik, trajectory_steps=cfg.rollout.steps)
  return cfg if lik == cfg.likelihood else dataclasses.replace(cfg, likelihood=lik)


def check_rollout_batch(cfg: TrainConfig, traj: Trajectory, rewards: Any, weights: Any = None) -> tuple[int, int]:
  """Trace-time checks of one rollout batch: the trajectory against ``cfg.rollout``, rewards ``[B]``,
  weights ``[B, L]`` (or a pair (weights, token advantages)). Returns (B, L).

  Raises:
    ShapeError: naming the argument, the shape found and the shape expected.
  """
  b, length = check_trajectory(traj, cfg.rollout, cfg_name="rollout")
  check_shape("rewards", rewards, (b,), "[B]: one reward per sequence")
  if weights is not None:
    pair = weights if isinstance(weights, tuple) else (weights, None)
    check_shape("weights", pair[0], (b, length), "[B, L] credit weights")
    check_optional_shape("weights[1] (token advantages)", pair[1], (b, length), "[B, L]")
  return b, length


def training_passes(estimator: LikelihoodFn) -> LikelihoodFn:
  """``estimator`` with its model passes run through the model's training variant
  (:meth:`~daca_jax.contracts.ModelFns.for_training`: LoRA dropout) under ``fold_in(key, stream)`` of
  the key it is called with. Wrapped inside :func:`daca_jax.parallel.per_sequence_keys`, each row's
  noise follows from its own row key, so a micro-batched update (``rl.grad_accum``) draws what one
  whole-batch call draws. Same signature; attributes (``row_keyed``) carried over, and marked
  ``training_noise`` (wrappers such as ``per_sequence_keys`` carry the mark outwards)."""

  @functools.wraps(estimator)
  def fn(fns: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array, cfg: Any,
         **kwargs: Any) -> TokenScores:
    model = as_model_fns(fns).for_training(jax.random.fold_in(key, _TRAIN_NOISE_STREAM))
    return estimator(model, params, tokens, prompt_len, key, cfg, **kwargs)

  fn.training_noise = True
  return fn


def make_scores_fn(logits_fn: Any, cfg: TrainConfig, *, mask_id: int,
                   estimator: LikelihoodFn | None = None) -> Callable[..., TokenScores]:
  """``scores(params, traj, key, row_offset=None) -> TokenScores`` of the configured estimator on a
  rollout (under ``parallel.strategy="pmap"`` each device scores its own rows). ``estimator`` replaces
  the registry's ``LIKELIHOOD[rl.likelihood]`` (same signature; e.g. one wrapped by
  :func:`daca_jax.parallel.per_sequence_keys`).

  The passes run through the model's training variant (:meth:`~daca_jax.contracts.ModelFns.for_training`,
  e.g. LoRA dropout) under a key derived from the estimator's own key (:func:`training_passes`): like the
  estimator's masks, that noise is shared by the passes of θ, θ_old and θ_ref under one key (θ_ref,
  adapters off, has none), and it is drawn per row wherever the estimator's key is.

  With ``rl.grad_accum > 1`` the estimator draws per row (:func:`daca_jax.parallel.per_sequence_keys`
  unless it already does), and ``row_offset`` (int32 []) is the index of ``traj``'s first row in the
  whole batch, for a micro-batch of it (:mod:`daca_jax.rl.accumulate`)."""
  cfg = with_trajectory_steps(cfg)
  fns = as_model_fns(logits_fn)
  if estimator is None:
    estimator = parallel.wrap_likelihood(training_passes(LIKELIHOOD.get(cfg.rl.likelihood)), cfg.parallel)
  elif not getattr(estimator, "training_noise", False):
    # a caller's estimator: its passes get training noise here (shared by its rows if it already
    # draws per row; wrap the per-row estimator around training_passes for per-row noise)
    estimator = training_passes(estimator)
  if cfg.rl.grad_accum > 1 and not getattr(estimator, "row_keyed", False):
    estimator = parallel.per_sequence_keys(estimator)

  def scores(params: Any, traj: Trajectory, key: jax.Array, row_offset: jax.Array | None = None) -> TokenScores:
    rows = {} if row_offset is None else {"row_offset": row_offset}
    return estimator(fns, params, traj.tokens, traj.prompt_len, key, cfg.likelihood, mask_id=mask_id,
                     commit_step=traj.commit_step, commit_conf=traj.commit_conf,
                     completion_mask=traj.completion_mask, **rows)

  return scores


def make_objective_grad(logits_fn: Any, cfg: TrainConfig, *, mask_id: int,
                        estimator: LikelihoodFn | None = None,
                        param_split: ParamSplit | None = None) -> ObjectiveGradFn:
  """The gradient of the configured objective for one rollout batch under one likelihood key.

  The returned ``grad(params, ref_params, traj, rewards, weights, key, old_params=None,
  advantages=None) -> (grads, aux)`` is the direction every update step takes (before the optimizer):

  * params: θ at which the loss is differentiated; ref_params: θ_ref of the KL term.
  * traj: the rollout; rewards: float32 [B] (groups of G adjacent); weights: float32 [B, L] credit
    weights, or a pair (weights, token advantages float32 [B, L]) from a token-reward credit.
  * key: the likelihood key (its masks are shared by θ, θ_old and θ_ref).
  * old_params: θ_old, the rollout policy; None means θ_old = θ (the first inner update, where
    logp_old is θ's own stop-gradient log-prob and needs no extra pass). Ignored (no θ_old pass) for
    an objective registered ``reads_old=False`` unless the advantage reads the KL (REINFORCE++, β > 0).
  * advantages: float32 [B] (computed once per rollout batch by :func:`make_update`); None computes
    them here (and, for an estimator that reads the KL, always here: from this pass's logp_old and
    logp_ref).

  ``estimator`` replaces the registry's (:func:`make_scores_fn`). It returns the gradient of the loss
  (a descent direction) and the objective's metrics with ``loss``; a trajectory that disagrees with
  ``cfg.rollout`` or rewards / weights of the wrong shape raise :class:`~daca_jax.errors.ShapeError`
  at trace time.

  With ``rl.pass_accum`` the gradient is accumulated one likelihood pass at a time over the registry's
  per-pass form of ``rl.likelihood`` (:mod:`daca_jax.rl.pass_accum`; ``estimator`` is then not used).

  With ``rl.grad_accum = M > 1`` the gradient is summed over M micro-batches of the rows inside the
  function (:mod:`daca_jax.rl.accumulate`: the same gradient and metrics as the whole batch's under
  the same per-row masks); ``param_split`` (LoRA's adapters) limits the accumulated gradient to the
  trainable part (the rest is zeros, as the frozen base's gradient otherwise).

  Raises:
    ConfigError: B does not split into ``rl.grad_accum`` micro-batches of whole groups.
  """
  cfg = with_trajectory_steps(cfg)
  rl = cfg.rl
  scores_fn = make_scores_fn(logits_fn, cfg, mask_id=mask_id, estimator=estimator)
  objective = OBJECTIVES.get(rl.objective)
  advantage = ADVANTAGES.get(advantage_name(rl.objective, rl.advantage, rl.normalize_adv_std))
  passes = _row_keyed_passes(logits_fn, cfg, mask_id) if rl.pass_accum and rl.grad_accum > 1 else None
  accumulated = (make_accumulated_grad(scores_fn, objective, advantage, cfg, param_split, passes)
                 if rl.grad_accum > 1 else None)
  if rl.pass_accum and rl.grad_accum == 1:  # one likelihood pass at a time (the registry's per-pass form)
    accumulated = _pass_accumulated(logits_fn, cfg, objective, advantage, mask_id, param_split)

  def grad(params: Any, ref_params: Any, traj: Trajectory, rewards: jax.Array, weights: Any, key: jax.Array,
           old_params: Any = None, advantages: jax.Array | None = None) -> tuple[Any, dict[str, jax.Array]]:
    b, _ = check_rollout_batch(cfg, traj, rewards, weights)
    weights, token_adv = weights if isinstance(weights, tuple) else (weights, None)
    if not (objective.reads_old or (advantage.needs_kl and rl.beta > 0)):
      old_params = None  # a ratio-free objective (wd1, SPG) reads no θ_old log-probs: no θ_old pass
    if accumulated is not None:  # under pmap each micro-batch splits over the devices (shard_rows)
      check_grad_accum(b, rl.grad_accum, rl.group_size,
                       jax.lax.axis_size(parallel.BATCH_AXES) if cfg.parallel.strategy == "pmap" else 1)
      return accumulated(params, ref_params, traj, rewards, weights, token_adv, key, old_params, advantages)
    adv = advantages
    if adv is None and not advantage.needs_kl:
      adv = advantage(rewards, rl.group_size)

    def targets(prm):
      """(logp, mask, weights, commit_now, token advantages, S) of the objective: the estimator's
      targets (S contexts of L positions, mask and weights tiled; ELBO factors per
      ``likelihood.elbo_terms``)."""
      scores = scores_fn(prm, traj, key)
      return (*objective_inputs(scores, *scored_positions(cfg, traj.completion_mask, weights), token_adv,
                                cfg.likelihood.elbo_terms),
              objective_states(scores, cfg.likelihood.elbo_terms))

    logp_old = None if old_params is None else jax.lax.stop_gradient(targets(old_params)[0])
    logp_ref = jax.lax.stop_gradient(targets(ref_params)[0]) if rl.beta > 0 else None

    def loss_fn(prm):
      logp, mask, w, commit_now, tok_adv, states = targets(prm)
      old = jax.lax.stop_gradient(logp) if logp_old is None else logp_old
      ref = old if logp_ref is None else logp_ref
      seq_adv = adv
      if seq_adv is None:  # REINFORCE++: the rollout policy's KL under this pass's masks
        seq_adv = advantage(rewards, rl.group_size, jnp.sum(mask * (old - ref), -1), rl.beta)
      batch = PolicyBatch(logp_old=old, logp_ref=ref, advantages=seq_adv, weights=w, mask=mask,
                          rewards=rewards, commit_now=commit_now, token_advantages=tok_adv,
                          completion_mask=traj.completion_mask, num_states=states)
      loss, aux = objective(logp, batch, rl)
      if adv is None:
        aux = dict(aux, adv_std=jnp.std(seq_adv))
      return loss, aux

    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    return grads, dict(aux, loss=loss)

  return grad


def _pass_accumulated(logits_fn: Any, cfg: TrainConfig, objective: Any, advantage: Any, mask_id: int,
                      param_split: ParamSplit | None) -> Callable[..., Any]:
  """:func:`daca_jax.rl.pass_accum.make_pass_accumulated_grad` over ``PASSES[rl.likelihood]``, its
  passes through the model's training variant as :func:`make_scores_fn`'s."""
  from daca_jax.likelihood import PASSES
  form = PASSES[cfg.rl.likelihood]  # configure.check_pass_accum refused estimators without one
  fns = as_model_fns(logits_fn)

  def pass_scores(params: Any, traj: Trajectory, key: jax.Array, j: jax.Array) -> tuple[TokenScores, jax.Array]:
    # under pmap this device scores its rows of pass j (row-keyed) and all-gathers them
    run = parallel.wrap_likelihood(_one_pass(form, j), cfg.parallel)
    return run(fns, params, traj.tokens, traj.prompt_len, key, cfg.likelihood, mask_id=mask_id,
               commit_step=traj.commit_step, commit_conf=traj.commit_conf, completion_mask=traj.completion_mask)

  return make_pass_accumulated_grad(pass_scores, form.num_passes(cfg.likelihood), objective, advantage, cfg,
                                    param_split)


def _one_pass(form: Any, j: jax.Array) -> Callable[..., Any]:
  """Pass ``j`` (int32 []) of a per-pass form as an estimator through the model's training variant."""
  return training_passes(lambda *a, **kw: form.run(*a, pass_index=j, **kw))


def _row_keyed_passes(logits_fn: Any, cfg: TrainConfig, mask_id: int) -> tuple[Callable[..., Any], int]:
  """(``pass_scores(params, micro-batch, key, row_offset, j)``, S): ``PASSES[rl.likelihood]`` drawing
  per row (:func:`daca_jax.parallel.per_sequence_keys`), for micro-batches with ``rl.pass_accum``."""
  from daca_jax.likelihood import PASSES
  form = PASSES[cfg.rl.likelihood]
  fns = as_model_fns(logits_fn)

  def pass_scores(params: Any, traj: Trajectory, key: jax.Array, row_offset: jax.Array,
                  j: jax.Array) -> tuple[TokenScores, jax.Array]:
    # shard_rows under pmap: this device's rows of the micro-batch, keyed by their rows in the batch
    wrap = parallel.shard_rows if cfg.parallel.strategy == "pmap" else parallel.per_sequence_keys
    run = wrap(_one_pass(form, j))
    return run(fns, params, traj.tokens, traj.prompt_len, key, cfg.likelihood, mask_id=mask_id,
               row_offset=row_offset, commit_step=traj.commit_step, commit_conf=traj.commit_conf,
               completion_mask=traj.completion_mask)

  return pass_scores, form.num_passes(cfg.likelihood)


def mask_seed_indices(j: jax.Array | int, grad_accum: int, num_iterations: int) -> jax.Array:
  """int32 [grad_accum]: the mask seed each micro-batch k of inner update ``j`` uses under
  ``rl.mask_seed_reuse``, (j·M + k + 1) mod μ, as d1's, SPG's and MAP's ``self._step % num_iterations`` picks
  it (``_step`` counts accumulation micro-steps and is incremented before it is read)."""
  k = jnp.arange(grad_accum, dtype=jnp.int32)
  return (j * grad_accum + k + 1) % num_iterations


def inner_update_key(key: jax.Array, j: jax.Array | int, rl: Any) -> jax.Array:
  """Inner update ``j``'s likelihood key: ``fold_in(key, j)``; with ``rl.mask_seed_reuse`` and
  ``rl.grad_accum > 1`` one key per micro-batch, ``fold_in(key, seed)`` for each of :func:`mask_seed_indices`
  (stacked on a leading axis of size ``rl.grad_accum``)."""
  if not (rl.mask_seed_reuse and rl.grad_accum > 1):
    return jax.random.fold_in(key, j)
  return jax.vmap(lambda i: jax.random.fold_in(key, i))(mask_seed_indices(j, rl.grad_accum, rl.num_iterations))


def make_update(logits_fn: Any, cfg: TrainConfig, optimizer: optax.GradientTransformation, *,
                mask_id: int, estimator: LikelihoodFn | None = None,
                param_split: ParamSplit | None = None) -> UpdateFn:
  """μ = ``rl.num_iterations`` policy updates on one rollout batch, as one pure function.

  The returned ``update(params, opt_state, ref_params, traj, rewards, weights, key) -> (params,
  opt_state, metrics)`` takes θ (also θ_old, the rollout policy, at entry), the optimizer state, the
  frozen θ_ref, the rollout, rewards float32 [B], weights as in :func:`make_objective_grad`, and a key
  (inner iteration j uses :func:`inner_update_key`: ``fold_in(key, j)`` unless ``rl.mask_seed_reuse``); the
  advantages are computed once for the μ updates
  (except REINFORCE++'s, which read each update's KL). Inner iterations 2..μ run in one ``lax.scan``.
  The metrics are the objective's, averaged over the μ iterations, with ``grad_norm``,
  ``zero_std_groups``, ``weight_std``, ``adv_std`` and (with ``rl.grad_agreement``) ``grad_cos``.
  ``estimator`` replaces the registry's (:func:`make_scores_fn`). With ``rl.grad_accum > 1`` every
  inner update's gradient is accumulated over micro-batches (:func:`make_objective_grad`, with
  ``param_split``), then one optimizer step is taken; θ_old's and θ_ref's log-probs are passes over the
  micro-batches too.
  """
  cfg = with_trajectory_steps(cfg)
  rl = cfg.rl
  grad_fn = make_objective_grad(logits_fn, cfg, mask_id=mask_id, estimator=estimator, param_split=param_split)
  advantage = ADVANTAGES.get(advantage_name(rl.objective, rl.advantage, rl.normalize_adv_std))

  def update(params: Any, opt_state: optax.OptState, ref_params: Any, traj: Trajectory, rewards: jax.Array,
             weights: Any, key: jax.Array) -> tuple[Any, optax.OptState, dict[str, jax.Array]]:
    old_params = params
    adv = None if advantage.needs_kl else advantage(rewards, rl.group_size)

    def inner(carry, j, first: bool = False):
      params, opt_state = carry
      # At the first inner iteration θ = θ_old, so logp_old is the policy's own (stop-gradient)
      # log-prob under the same masks: no separate θ_old pass is needed.
      grads, aux = grad_fn(params, ref_params, traj, rewards, weights, inner_update_key(key, j, rl),
                           old_params=None if first else old_params, advantages=adv)
      updates, opt_state = optimizer.update(grads, opt_state, params)
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
    w = weights[0] if isinstance(weights, tuple) else weights
    valid = traj.completion_mask
    metrics["weight_std"] = jnp.sqrt(jnp.sum(jnp.square(w - 1.0) * valid) / jnp.maximum(jnp.sum(valid), 1.0))
    return params, opt_state, metrics

  return update


__all__ = ["ObjectiveGradFn", "UpdateFn", "check_rollout_batch", "inner_update_key", "make_objective_grad",
           "make_scores_fn", "make_update", "mask_seed_indices", "with_trajectory_steps"]
