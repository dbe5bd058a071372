"""Policy-gradient objectives of the base methods, composable with any credit and likelihood.

Every objective is ``fn(logp [B, L], batch: PolicyBatch, *, <the RLConfig fields it reads>) ->
(loss, aux)``: ``logp`` are the current policy's per-token log-probs (differentiable), ``batch``
carries the stop-gradient quantities of the rollout, and the keyword-only arguments are the only
options it sees (diffu-GRPO: ``clip_eps`` and ``beta``), with the defaults of
:class:`~daca_jax.config.rl.RLConfig`. Registry ``OBJECTIVES`` (config field ``rl.objective``) holds
``entry(logp, batch, rl_cfg)``, which hands each objective its own fields of ``rl_cfg``
(:func:`daca_jax.registry.config_fields`). Every objective checks its inputs at trace time
(:func:`daca_jax.contracts.check_policy_batch`): a field of the wrong shape is a
:class:`daca_jax.errors.ShapeError`, never a silent broadcast.

Every objective is *row-local*: the derivative of its loss with respect to row r of ``logp`` depends on
the other rows only through ``batch`` (normalisers are token counts, group or row counts, never the
other rows' ``logp``). Gradient accumulation relies on it (:mod:`daca_jax.rl.accumulate`; a new
objective is checked by adding it to ``tests/rl/test_grad_accum.py``, which covers every registered one).
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import jax
import jax.numpy as jnp

from daca_jax.contracts import PolicyBatch, check_policy_batch
from daca_jax.errors import ConfigError
from daca_jax.registry import Registry, check_options, config_fields, section_kwargs
from daca_jax.config.rl import RLConfig
from daca_jax.config.train import TrainConfig

Aux = dict[str, jax.Array]
ObjectiveFn = Callable[..., tuple[jax.Array, Aux]]
# Registry entries: (logp, batch, rl_cfg) -> (loss, aux).
OBJECTIVES: Registry[Callable[[jax.Array, PolicyBatch, RLConfig], tuple[jax.Array, Aux]]] = Registry(
    "objective", "rl.objective")
# Objectives whose loss is a sum of per-token terms, so a per-token advantage is meaningful.
TOKEN_ADVANTAGE_OBJECTIVES = frozenset({"diffu_grpo", "rldf"})


def check_token_credit(cfg: TrainConfig, token_level: bool) -> None:
  """Refuses a credit assigner that hands out per-token advantages (``token_level``: position_value,
  contrast) under an objective that reads sequence advantages only (its ratio or bound is per
  sequence, so a per-token advantage has no term to weight).

  Raises:
    ConfigError: naming ``rl.credit``, its value and the objectives that accept it.
  """
  if token_level and cfg.rl.objective not in TOKEN_ADVANTAGE_OBJECTIVES:
    raise ConfigError("rl.credit", cfg.rl.credit, "a sequence-level credit with rl.objective="
                      f"{cfg.rl.objective!r} (per-token advantages need one of "
                      f"{sorted(TOKEN_ADVANTAGE_OBJECTIVES)})")


def register_objective(name: str, per_group: bool = False,
                       reads_old: bool = True) -> Callable[[ObjectiveFn], ObjectiveFn]:
  """Decorator registering ``fn(logp, batch, *, <RLConfig fields>)`` as ``OBJECTIVES[name]``.

  ``reads_old=False`` declares that ``fn`` never reads ``batch.logp_old`` (a ratio-free objective:
  wd1, SPG), so the learner skips the θ_old pass of the μ > 1 inner updates
  (:func:`daca_jax.rl.update.make_objective_grad`).

  The returned function (what a direct call such as ``diffu_grpo_loss(logp, batch, clip_eps=0.2,
  beta=0.04)`` runs) checks ``(logp, batch)`` with :func:`~daca_jax.contracts.check_policy_batch`
  first (with ``per_group``: B a multiple of ``group_size``); the registry entry takes an
  :class:`~daca_jax.config.rl.RLConfig` and passes on only the fields ``fn`` declares.
  """

  def deco(fn: ObjectiveFn) -> ObjectiveFn:
    reads = config_fields(fn, RLConfig)
    signature = inspect.signature(fn)
    if per_group and "group_size" not in reads:
      raise TypeError(f"objective {name!r} is per_group: it must declare the keyword-only group_size")

    def run(logp: jax.Array, batch: PolicyBatch, options: dict[str, Any]) -> tuple[jax.Array, Aux]:
      bound = signature.bind(logp, batch, **options)
      bound.apply_defaults()
      check_policy_batch(logp, batch, name, bound.arguments["group_size"] if per_group else 0)
      return fn(logp, batch, **options)

    @functools.wraps(fn)
    def checked(logp: jax.Array, batch: PolicyBatch, **options: Any) -> tuple[jax.Array, Aux]:
      check_options(RLConfig, options, fn.__name__, reads)
      return run(logp, batch, options)

    def entry(logp: jax.Array, batch: PolicyBatch, cfg: RLConfig) -> tuple[jax.Array, Aux]:
      return run(logp, batch, section_kwargs(cfg, reads))  # cfg is a validated section

    entry.reads = reads  # the RLConfig fields this objective sees
    entry.reads_old = reads_old  # False: no θ_old log-probs needed (no ratio)
    entry.__doc__, entry.__name__ = fn.__doc__, fn.__name__
    OBJECTIVES.register(name)(entry)
    return checked

  return deco


def token_advantages(batch: PolicyBatch) -> jax.Array:
  """float32 [B, L] advantage of every token: ``batch.token_advantages`` when given, else the
  sequence advantage times the credit weight."""
  if batch.token_advantages is not None:
    return batch.token_advantages
  return batch.advantages[:, None] * batch.weights


def _sequence_advantages_only(batch: PolicyBatch, name: str) -> None:
  if batch.token_advantages is not None:
    raise ValueError(f"objective {name!r} works on sequence advantages; per-token advantages "
                     f"(rl.credit='token_reward') need one of {sorted(TOKEN_ADVANTAGE_OBJECTIVES)}")


def clipped_surrogate(ratio: jax.Array, advantages: jax.Array, clip_low: float,
                      clip_high: float | None = None) -> tuple[jax.Array, jax.Array]:
  """PPO's clipped surrogate ``min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high) A)`` (to maximise), elementwise, with
  the references' gradient (PyTorch's ``clamp`` passes the gradient on its closed interval, ``min`` splits a
  tie): ``A·∇ρ`` wherever the clip does not take over, 0 where it does. Written as ``jnp.clip`` and
  ``jnp.minimum`` it would halve a tie's gradient at each of the two ties of ρ = 1 with ε = 0 (0.625 A,
  ESPO's Countdown recipe) and at a boundary of the interval.

  Args:
    ratio: float32 array ρ (any shape); advantages: A, broadcastable to it.
    clip_low: ε_low; clip_high: ε_high (None: ε_low, the symmetric clip).
  Returns:
    (surrogate like ``ratio * advantages``, bool: the clip took over).
  """
  high = clip_low if clip_high is None else clip_high
  unclipped = ratio * advantages
  clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + high) * advantages
  binding = clipped < unclipped  # only outside the closed interval, where the clipped term's gradient is 0
  return jnp.where(binding, jax.lax.stop_gradient(clipped), unclipped), binding


def k3_kl(logp: jax.Array, logp_ref: jax.Array) -> jax.Array:
  """Schulman's k3 estimator of KL(π_θ || π_ref) per token: ``exp(r) − r − 1`` with r = logp_ref − logp."""
  r = logp_ref - logp
  return jnp.exp(r) - r - 1.0


@register_objective("diffu_grpo")
def diffu_grpo_loss(logp: jax.Array, batch: PolicyBatch, *,
                    clip_eps: float = RLConfig.clip_eps,
                    beta: float = RLConfig.beta) -> tuple[jax.Array, Aux]:
  """diffu-GRPO (d1, Zhao et al. 2025, Eq. 3) with token credit.

  Per token: ``ρ = exp(logp − logp_old)``, ``Â = w·A``,
  ``ℓ = −min(ρ Â, clip(ρ, 1−ε, 1+ε) Â) + β·k3(logp, logp_ref)``; the loss is the token mean over the
  batch, ``Σ m ℓ / Σ m``.

  Args:
    logp: float32 [B, N] the current policy's log-probs of the scored targets (N = L, or C·L for an
      estimator with C contexts per token), differentiable.
    batch: the rollout's stop-gradient quantities (``logp_old``, ``logp_ref``, ``mask`` [B, N];
      ``advantages`` [B]; ``weights`` or ``token_advantages`` [B, N]).
    clip_eps: ε of the ratio clip (``rl.clip_eps``; d1: 0.5).
    beta: β, the KL weight (``rl.beta``; d1: 0.04).
  Returns:
    (scalar loss, aux with "kl", "clip_frac", "ratio_mean", "pg_loss").
  Raises:
    ShapeError: a field of ``batch`` whose shape disagrees with ``logp`` (checked when traced).
  """
  m = batch.mask
  denom = jnp.maximum(jnp.sum(m), 1.0)
  ratio = jnp.exp(logp - batch.logp_old)
  surrogate, binding = clipped_surrogate(ratio, token_advantages(batch), clip_eps)
  pg = -surrogate
  kl = k3_kl(logp, batch.logp_ref)
  per_token = pg + beta * kl
  loss = jnp.sum(per_token * m) / denom
  aux = {
      "pg_loss": jnp.sum(pg * m) / denom,
      "kl": jnp.sum(kl * m) / denom,
      "clip_frac": jnp.sum(binding.astype(jnp.float32) * m) / denom,
      "ratio_mean": jnp.sum(ratio * m) / denom,
  }
  return loss, aux


def _token_mean(x: jax.Array, m: jax.Array) -> jax.Array:
  return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)


@register_objective("wd1", per_group=True, reads_old=False)
def wd1_loss(logp: jax.Array, batch: PolicyBatch, *,
             group_size: int = RLConfig.group_size,
             beta: float = RLConfig.beta) -> tuple[jax.Array, Aux]:
  """wd1 (Tang et al. 2025, "wd1: Weighted Policy Optimization for Reasoning in Diffusion LMs").

  Ratio-free weighted likelihood: with the sequence log-likelihood ``ℓ_b = Σ_i m w logp`` and, within
  each prompt's group of G, ``p⁺ = softmax(A)`` and ``p⁻ = softmax(−A)``,
  ``loss = mean_groups Σ_g (p⁻_g − p⁺_g) ℓ_g`` (+ β·k3-KL token mean when β > 0). No θ_old ratio.

  Returns:
    (scalar loss, aux with "kl", "pg_loss", "clip_frac" (0), "ratio_mean" (1)).
  """
  _sequence_advantages_only(batch, "wd1")
  g = group_size
  seq = jnp.sum(batch.mask * batch.weights * logp, axis=-1).reshape(-1, g)  # [N, G]
  adv = batch.advantages.reshape(-1, g)
  coef = jax.nn.softmax(-adv, axis=-1) - jax.nn.softmax(adv, axis=-1)
  pg = jnp.mean(jnp.sum(coef * seq, axis=-1))
  kl = _token_mean(k3_kl(logp, batch.logp_ref), batch.mask)
  loss = pg + beta * kl
  return loss, {"pg_loss": pg, "kl": kl, "clip_frac": jnp.zeros(()), "ratio_mean": jnp.ones(())}


@register_objective("gspo")
def gspo_loss(logp: jax.Array, batch: PolicyBatch, *,
              clip_eps: float = RLConfig.clip_eps,
              beta: float = RLConfig.beta) -> tuple[jax.Array, Aux]:
  """GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization"), sequence-level clipping.

  ``s_b = exp(Σ_i m w (logp − logp_old) / Σ_i m)`` (the length-normalised sequence ratio; with credit
  weights of mean 1 the weighted mean log-ratio), ``loss = mean_b −min(s_b A_b, clip(s_b, 1±ε) A_b)``
  + β·k3-KL token mean. GSPO uses much smaller ε than token-level PPO (the paper: 3e-4 / 4e-4).
  Also registered as ``"gdpo"`` (below).

  Returns:
    (scalar loss, aux with "kl", "pg_loss", "clip_frac", "ratio_mean").
  Raises:
    ValueError: ``batch.token_advantages`` is set (a sequence-level objective).
  """
  _sequence_advantages_only(batch, "gspo (or its alias gdpo)")
  m = batch.mask
  n = jnp.maximum(jnp.sum(m, -1), 1.0)
  log_ratio = jnp.sum(m * batch.weights * (logp - batch.logp_old), -1) / n  # [B]
  ratio = jnp.exp(log_ratio)
  surrogate, binding = clipped_surrogate(ratio, batch.advantages, clip_eps)
  pg = jnp.mean(-surrogate)
  kl = _token_mean(k3_kl(logp, batch.logp_ref), m)
  loss = pg + beta * kl
  aux = {"pg_loss": pg, "kl": kl, "clip_frac": jnp.mean(binding.astype(jnp.float32)),
         "ratio_mean": jnp.mean(ratio)}
  return loss, aux


# GDPO (Rojas et al. 2025, "Improving Reasoning for Diffusion Language Models via Group Diffusion
# Policy Optimization") optimises the same sequence-level clipped surrogate as GSPO: the ratio is that
# of sequence likelihoods, length-normalised, with the likelihood the sum of the estimator's per-token
# contributions (GDPO's ELBO with rl.likelihood=elbo, Σ w·logp under SML). What sets GDPO apart is
# the likelihood estimator and its advantages A = r − mean (rl.advantage / rl.normalize_adv_std), and
# token-level ε rather than GSPO's 3e-4, none of which lives in the objective, so "gdpo" is an alias
# of "gspo" (OBJECTIVES.aliases()).
OBJECTIVES.alias("gdpo", "gspo")


@register_objective("reinforce_pp")
def reinforce_pp_loss(logp: jax.Array, batch: PolicyBatch, *,
                      clip_eps: float = RLConfig.clip_eps) -> tuple[jax.Array, Aux]:
  """REINFORCE++ (Hu 2025): no critic, no group baseline, token-level PPO clip.

  Per token ``ℓ = −min(ρ wA, clip(ρ, 1±ε) wA)``, token mean over the batch; no KL term in the loss:
  REINFORCE++ folds the KL into the reward, which its advantage estimator does
  (:func:`daca_jax.rl.advantages.reinforce_pp_advantages`, ``rl.advantage="reinforce_pp"``, the
  default for this objective), so ``batch.advantages`` arrive already KL-shaped and batch-normalised.

  Returns:
    (scalar loss, aux with "kl" (the k1 KL token mean of the rollout policy), "pg_loss",
    "clip_frac", "ratio_mean").
  """
  _sequence_advantages_only(batch, "reinforce_pp")
  m = batch.mask
  ratio = jnp.exp(logp - batch.logp_old)
  surrogate, binding = clipped_surrogate(ratio, batch.advantages[:, None] * batch.weights, clip_eps)
  pg = _token_mean(-surrogate, m)
  aux = {"pg_loss": pg, "kl": _token_mean(batch.logp_old - batch.logp_ref, m),
         "clip_frac": _token_mean(binding.astype(jnp.float32), m),
         "ratio_mean": _token_mean(ratio, m)}
  return pg, aux


@register_objective("rldf")
def rldf_loss(logp: jax.Array, batch: PolicyBatch, *, clip_eps: float = RLConfig.clip_eps,
              beta: float = RLConfig.beta, rldf_tau: float = RLConfig.rldf_tau) -> tuple[jax.Array, Aux]:
  """RLDF (Reinforcement Learning from Denoising Feedback) on rebuilt rollout states.

  With ``rl.likelihood="rldf"`` every (state, position) pair is a target; the clean-state clip drops
  a target whose probability under the rollout policy, ``exp(logp_old)``, is below ``rl.rldf_tau``
  (0.6) unless the position was committed at that state (``batch.commit_now``). The kept targets get
  diffu-GRPO's clipped token loss with β·k3-KL (RLDF uses β = 0.01; μ = 1 makes it REINFORCE), as a
  mean over kept targets. With another estimator (no ``commit_now``) no target is dropped and this
  is diffu_grpo.

  Returns:
    (scalar loss, aux as diffu_grpo plus "rldf_kept_frac", the kept share of the targets).
  """
  keep = batch.mask
  if batch.commit_now is not None:
    clean = (jnp.exp(batch.logp_old) >= rldf_tau) | (batch.commit_now > 0)
    keep = keep * clean.astype(keep.dtype)
  loss, aux = diffu_grpo_loss(logp, batch.replace(mask=keep), clip_eps=clip_eps, beta=beta)
  aux["rldf_kept_frac"] = jnp.sum(keep) / jnp.maximum(jnp.sum(batch.mask), 1.0)
  return loss, aux
