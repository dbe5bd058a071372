"""BGPO (Lin et al. 2025, "Boundary-Guided Policy Optimization for Memory-efficient RL of Diffusion
Large Language Models", arXiv 2510.11683; code THU-KEG/BGPO, not readable offline: this transcribes
the paper's abstract and README claims and the issue's statement of the bound).

ELBO-based RL maximises ``A · ρ`` with the sequence ratio ``ρ = exp(ELBO_θ − ELBO_old)`` and
``ELBO ≈ (1/n) Σ_j E_j`` over n Monte-Carlo samples (:mod:`daca_jax.likelihood.elbo_mc`). ``exp`` of
a mean couples every sample, so a gradient keeps all n samples' graphs. BGPO maximises a lower bound
that is a sum of per-sample terms, with ``δ_j = E_j(θ) − E_j(θ_old)``:

* A ≥ 0 (Taylor, the tangent of exp at 0: ``e^x ≥ 1 + x``): ``A · (1 + (1/n) Σ_j δ_j)``;
* A < 0 (Jensen, exp convex: ``e^{mean δ} ≤ mean e^δ``, and A < 0 flips it): ``A · (1/n) Σ_j e^{δ_j}``.

Both are ≤ ``A ρ``; at θ = θ_old (on-policy) both equal ``A`` and their gradients equal
``A ∇ρ = A (1/n) Σ_j ∇E_j`` — BGPO's "equivalence" property. Each term reads one sample, so the
gradient can be accumulated sample by sample (:mod:`daca_jax.rl.pass_accum`, ``rl.pass_accum``).

Library choices where the paper's code could not be read: the ratio of each term is clipped as PPO
clips (``min(r_j A, clip(r_j, 1 ± ε) A)`` with ``r_j`` the term's ratio ``1 + δ_j`` or ``e^{δ_j}``),
which keeps the sum per-sample and never binds at μ = 1 (BGPO's on-policy setting); ``δ_j`` is the
raw (not length-normalised) ELBO difference, as an ELBO ratio is; the loss is the mean over sequences
plus β·k3 KL over the scored targets (BGPO's β unknown; the presets say what they use). Credit
weights multiply each token's term of ``E_j`` (a weighted ELBO); per-token advantages are refused.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from daca_jax.contracts import PolicyBatch
from daca_jax.errors import ConfigError
from daca_jax.rl.methods.base import Aux, JobConfig, LossOptions, Method, clipped_surrogate, k3_kl, objective, sequence_advantages_only, token_mean



def sample_log_ratios(logp: jax.Array, batch: PolicyBatch) -> jax.Array:
  """float32 [B, n] each Monte-Carlo sample's own ELBO difference ``δ_j = E_j(θ) − E_j(θ_old)``.

  ``batch.weights`` carry the ELBO factor ``1/(n t_j)`` times the credit weight
  (:func:`daca_jax.contracts.objective_inputs`), so n times the sample's weighted sum is ``E_j``'s
  difference; with one context (S = 1: a log-prob estimator, or ``elbo_terms="summed"``) the whole
  sequence log-ratio.
  """
  b, total = logp.shape
  n = batch.num_states
  per_target = batch.mask * batch.weights * (logp - batch.logp_old)
  return n * jnp.sum(per_target.reshape(b, n, total // n), axis=-1)


def bgpo_terms(log_ratios: jax.Array, advantages: jax.Array, clip_eps: float) -> tuple[jax.Array, jax.Array, jax.Array]:
  """BGPO's per-sample surrogate (to maximise) and its ratios.

  Args:
    log_ratios: float32 [B, n] ``δ_j``.
    advantages: float32 [B] ``A``.
    clip_eps: ε of the PPO-style clip of each term's ratio.
  Returns:
    (surrogate float32 [B, n] with ``(1/n) Σ_j`` of a row its bound, ratios float32 [B, n], clipped
    bool [B, n]: the clip chose the clipped term).
  """
  a = advantages[:, None]
  ratio = jnp.where(a >= 0, 1.0 + log_ratios, jnp.exp(log_ratios))  # Taylor / Jensen
  surrogate, binding = clipped_surrogate(ratio, a, clip_eps)
  return surrogate, ratio, binding


@objective("bgpo")
def bgpo_loss(logp: jax.Array, batch: PolicyBatch, *, clip_eps: float = LossOptions.clip_eps,
              beta: float = LossOptions.beta) -> tuple[jax.Array, Aux]:
  """BGPO's linear lower bound of the ELBO-ratio objective (module docstring), to minimise.

  ``loss = −mean_b (1/n) Σ_j min(r_bj A_b, clip(r_bj, 1 ± ε) A_b) + β · k3-KL token mean``, with
  ``r = 1 + δ`` (A ≥ 0) or ``e^δ`` (A < 0) and n = ``batch.num_states`` samples. Row-local and
  pass-local: the derivative with respect to sample j's targets reads sample j only.

  Args:
    logp: float32 [B, n·L] the samples' target log-probs (differentiable).
    batch: stop-gradient fields (``num_states`` = n).
    clip_eps: ε (``rl.clip_eps``); beta: β (``rl.beta``).
  Returns:
    (scalar loss, aux with "pg_loss", "kl", "clip_frac", "ratio_mean", "bound_gap": mean of
    ``A (ρ − bound)`` ≥ 0, the bound's slack, 0 on-policy).
  Raises:
    ValueError: per-token advantages (``rl.credit="token_reward"``).
  """
  sequence_advantages_only(batch, "bgpo")
  delta = sample_log_ratios(logp, batch)  # [B, n]
  surrogate, ratio, clipped = bgpo_terms(delta, batch.advantages, clip_eps)
  pg = -jnp.mean(jnp.mean(surrogate, axis=-1))
  kl = token_mean(k3_kl(logp, batch.logp_ref), batch.mask)
  exact = jnp.exp(jnp.mean(delta, axis=-1)) * batch.advantages  # A ρ, the objective the bound is under
  bound = jnp.mean(ratio, axis=-1) * batch.advantages
  aux = {"pg_loss": pg, "kl": kl, "clip_frac": jnp.mean(clipped.astype(jnp.float32)),
         "ratio_mean": jnp.mean(jnp.exp(jnp.mean(delta, axis=-1))),
         "bound_gap": jax.lax.stop_gradient(jnp.mean(exact - bound))}
  return pg + beta * kl, aux


# Estimators whose contexts are equally weighted Monte-Carlo samples of one sequence likelihood (or a
# single context): BGPO's per-sample terms are meaningful over them.
BGPO_LIKELIHOODS = ("elbo_mc", "stratified", "mean_field", "trajectory")
# Estimators whose every pass is one Monte-Carlo sample of the sequence likelihood: BGPO's terms are per
# sample, so rl.pass_accum is exact there only (SML's strata are parts of one sample).
SAMPLE_PER_PASS = ("elbo_mc",)


def check_bgpo(cfg: JobConfig) -> None:
  """Refuses ``rl.objective="bgpo"`` with an estimator whose contexts are not equally weighted
  samples of the sequence likelihood (one line, with the reason).

  Raises:
    ConfigError: ``rl.likelihood`` not in :data:`BGPO_LIKELIHOODS` — GDPO's ``elbo`` weighs its
      quadrature nodes unequally (Jensen's mean needs equal weights), ``coupled`` pairs complementary
      masks, ``rldf`` scores overlapping targets per state, ``stepmerge`` carries MAP's position term;
      ``rl.pass_accum`` with an estimator of several passes per sample (not :data:`SAMPLE_PER_PASS`).
  """
  rl = cfg.rl
  if rl.objective != "bgpo":
    return
  if rl.likelihood not in BGPO_LIKELIHOODS:
    raise ConfigError("rl.likelihood", rl.likelihood,
                      f"one of {list(BGPO_LIKELIHOODS)} with rl.objective='bgpo' (its Jensen bound averages "
                      "equally weighted Monte-Carlo samples of the sequence likelihood; use 'elbo_mc' for an ELBO)")
  if rl.pass_accum and rl.likelihood not in SAMPLE_PER_PASS:
    raise ConfigError("rl.pass_accum", True, f"False with rl.objective='bgpo' and rl.likelihood={rl.likelihood!r}: "
                      "BGPO's Jensen term exponentiates a whole Monte-Carlo sample, which spans every pass "
                      f"there; estimators with one sample per pass: {list(SAMPLE_PER_PASS)}")


METHOD = Method(bgpo_loss, pass_local=True, check=check_bgpo)
