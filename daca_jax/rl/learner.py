"""GRPO learner for masked diffusion LMs, generic over objective, credit and likelihood.

One iteration: rollout (jit) → rewards on the host → credit weights (once per rollout) → sequence
advantages (``rl.advantage``, once per rollout batch; REINFORCE++'s, which read the KL under each
update's likelihood masks, once per inner update) → μ inner iterations, each with a new likelihood
key whose masks are shared by θ, θ_old and θ_ref; θ_old is the policy that produced the rollout.
All μ updates run in one jitted ``lax.scan``. The update step and its gradient are pure functions
(:func:`daca_jax.rl.update.make_update`, :func:`~daca_jax.rl.update.make_objective_grad`) that this
class builds and holds beside the rollout and the credit assignment.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from daca_jax import parallel
from daca_jax.config.train import TrainConfig
from daca_jax.credit import CREDIT, TAGGERS, CreditInputs, CreditOutput, group_agreement_mask
from daca_jax.credit.base import RECORDS
from daca_jax.contracts import ParamSplit, TokenScores, Trajectory, as_model_fns, check_shape
from daca_jax.diffusion.rollout import make_rollout_fn, micro_batched
from daca_jax.errors import ConfigError
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.rl.advantages import ADVANTAGES, advantage_name
from daca_jax.rl.methods import check_token_credit
from daca_jax.rl.optim import make_optimizer
from daca_jax.rl.update import check_rollout_batch, make_objective_grad, make_update, with_trajectory_steps


class GRPOLearner:
  """Rollout, credit and update functions of one configured method.

  Args:
    logits_fn: pure ``(params, tokens[B, T]) -> logits[B, T, V]``, or a
      :class:`~daca_jax.contracts.ModelFns` (``daca_jax.models.make_logits_fn``).
    cfg: validated :class:`TrainConfig` (uses ``rollout``, ``credit``, ``likelihood``, ``rl``).
    mask_id: ``[MASK]`` id.
    eos_id: end-of-sequence id.
    tokenizer: the task's tokenizer; needed by credit assigners that tag tokens (``dtca``).
    hidden_logits_fn: the same model returning ``(logits, hidden)``
      (``make_logits_fn(graphdef, return_hidden=True)``); needed by ``delta``, whose rollout
      records each token's hidden state at its commit step.
    optimizer_wrapper: wraps the configured optimizer (e.g. :func:`daca_jax.models.lora.lora_optimizer`,
      which freezes the base and keeps optimizer state for the adapters only).
    param_split: the part of the parameters the optimizer changes (:data:`daca_jax.models.lora.LORA_SPLIT`
      with LoRA): the compiled update returns that part only and keeps the caller's frozen arrays,
      instead of a copy of the base at every step.
    extra_records: trajectory records to keep beyond what the configured credit needs (``"step_conf"``,
      ``"step_entropy"``, ``"commit_hidden"``), e.g. for :mod:`daca_jax.viz`, which draws other
      assigners' weights from the same rollout. Recording changes neither the sampled tokens nor the
      number of model calls.
    mesh: the device mesh of ``parallel`` (default :func:`daca_jax.parallel.make_mesh` over all
      devices); a plan passes one over compile-only devices of its target
      (:mod:`daca_jax.planning.targets`). Unused with ``parallel.strategy="none"``.

  Attributes:
    rollout: ``(params, prompts[B, P], key) -> Trajectory`` (jitted, sharded per ``parallel``; with
      ``rl.rollout_batch`` sampled that many rows per call, the same trajectory:
      :func:`daca_jax.diffusion.rollout.micro_batched`).
    objective_grad: ``(params, ref_params, traj, rewards, weights, key, old_params=None,
      advantages=None) -> (grads, aux)``, the direction of every update step
      (:func:`daca_jax.rl.update.make_objective_grad`), exposed so that studies can compare it with
      the true policy gradient (:mod:`daca_jax.studies.gradient_study`).
    update: ``(params, opt_state, ref_params, traj, rewards, weights, key) -> (params, opt_state,
      metrics)``, the μ inner updates compiled for ``parallel.strategy``, each over ``rl.grad_accum``
      micro-batches (:func:`daca_jax.rl.update.make_update`).

  Raises:
    ConfigError: the configured credit assigner needs a tokenizer or hidden states that were not
      given.
  """

  def __init__(self, logits_fn: Callable[..., jax.Array], cfg: TrainConfig, *, mask_id: int, eos_id: int,
               tokenizer: Any = None, hidden_logits_fn: Callable[..., Any] | None = None,
               optimizer_wrapper: Callable[[optax.GradientTransformation], optax.GradientTransformation]
               | None = None, param_split: ParamSplit | None = None,
               extra_records: frozenset[str] | set[str] | tuple[str, ...] = (), mesh: Any = None):
    cfg = with_trajectory_steps(cfg)  # trajectory / rldf rebuild the rollout's own steps
    self.cfg = cfg
    logits_fn = as_model_fns(logits_fn)
    hidden_logits_fn = None if hidden_logits_fn is None else as_model_fns(hidden_logits_fn, "hidden_logits_fn")
    self.logits_fn = logits_fn
    self.mask_id = mask_id
    self.credit = CREDIT.get(cfg.rl.credit)
    # under parallel.strategy="pmap" each device scores its own rows (daca_jax.parallel)
    self.likelihood = parallel.wrap_likelihood(LIKELIHOOD.get(cfg.rl.likelihood), cfg.parallel)
    self.advantage = ADVANTAGES.get(advantage_name(cfg.rl.objective, cfg.rl.advantage, cfg.rl.normalize_adv_std))
    # Credit assigners that read advantages (delta, position_value) run before any update pass, so an
    # estimator that needs the update's KL hands them the group advantages instead.
    self._credit_advantage = (ADVANTAGES.get(advantage_name("", "", cfg.rl.normalize_adv_std))
                              if self.advantage.needs_kl else self.advantage)
    check_token_credit(cfg, self.credit.token_level)
    total_updates = cfg.rl.steps * cfg.rl.num_iterations
    self.optimizer, self.schedule = make_optimizer(cfg.rl.learning_rate, cfg.rl.warmup_steps,
                                                   cfg.rl.weight_decay, cfg.rl.max_grad_norm,
                                                   decay_steps=max(total_updates - cfg.rl.warmup_steps, 1)
                                                   if cfg.rl.lr_schedule == "cosine" else 0,
                                                   eps=cfg.rl.adam_eps, b1=cfg.rl.adam_b1, b2=cfg.rl.adam_b2,
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
      self.tagger = TAGGERS.get(cfg.credit.dtca.tagger)(tokenizer)
    self.rollout = make_rollout_fn(rollout_logits_fn, cfg.rollout, mask_id=mask_id, eos_id=eos_id,
                                   record_step_conf="step_conf" in records,
                                   record_step_entropy="step_entropy" in records,
                                   record_commit_hidden="commit_hidden" in records)
    self.credit_weights = jax.jit(lambda traj: self.credit(traj, cfg.credit, cfg.rollout))
    self._assign = jax.jit(self._assign_credit)
    if cfg.parallel.strategy != "none" and mesh is None:
      mesh = parallel.make_mesh(cfg.parallel)
    self.mesh = mesh
    self.rollout = parallel.shard_rollout(self.rollout, cfg.parallel, mesh)
    rollout_slot = self.rollout.aot
    if cfg.rl.rollout_batch:  # sampled a micro-batch at a time, the same trajectories
      shards = 1 if cfg.parallel.strategy == "none" else parallel.num_batch_shards(mesh)
      self.rollout = micro_batched(self.rollout, cfg.rl.rollout_batch, shards)
    # The update step is a pure function (daca_jax.rl.update); the learner only holds it.
    self.objective_grad = make_objective_grad(logits_fn, cfg, mask_id=mask_id, param_split=param_split)
    self._update = make_update(logits_fn, cfg, self.optimizer, mask_id=mask_id, param_split=param_split)
    self.update = parallel.compile_update(self._update, cfg.parallel, mesh, param_split=param_split)
    # Where executables compiled ahead of time go (daca_jax.parallel.aot.attach).
    self.aot_slots = {"rollout": rollout_slot, "update": self.update.aot}

  def init_opt_state(self, params: Any) -> optax.OptState:
    return self.optimizer.init(params)

  def init_credit_state(self) -> Any:
    """The credit assigner's initial state, or None when it is stateless."""
    if not self.credit.stateful:
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
    return check_rollout_batch(self.cfg, traj, rewards, weights)

  def logprobs(self, params: Any, traj: Trajectory, key: jax.Array) -> TokenScores:
    """The configured estimator's :class:`~daca_jax.contracts.TokenScores` of the rollout ``traj`` under
    ``params`` and ``key``.

    Every row an estimator may read comes from the trajectory (the commit steps that commit-order strata
    and the trajectory estimators need, the commit confidences, the completion mask), so this works
    under every valid config; each estimator ignores the rows it does not read.

    Args:
      params: the policy's parameters.
      traj: the rollout (``tokens`` [B, P+L], ``prompt_len``, ``commit_step`` / ``commit_conf`` /
        ``completion_mask`` [B, L]).
      key: the likelihood key (the same key gives the same masks for θ, θ_old and θ_ref).
    Raises:
      TypeError: ``traj`` is not a :class:`~daca_jax.contracts.Trajectory`.
    """
    if not isinstance(traj, Trajectory):
      raise TypeError(f"GRPOLearner.logprobs(params, traj, key) takes the rollout's Trajectory (its commit "
                      f"steps are part of what an estimator reads), got {type(traj).__name__}")
    return self.likelihood(self.logits_fn, params, traj.tokens, traj.prompt_len, key, self.cfg.likelihood,
                           mask_id=self.mask_id, commit_step=traj.commit_step, commit_conf=traj.commit_conf,
                           completion_mask=traj.completion_mask)
