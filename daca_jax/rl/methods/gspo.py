"""GSPO, sequence-level clipping (Zheng et al. 2025, "Group Sequence Policy Optimization"), and GDPO.

GDPO (Rojas et al. 2025, "Improving Reasoning for Diffusion Language Models via Group Diffusion
Policy Optimization") optimises the same sequence-level clipped surrogate as GSPO: the ratio is that
of sequence likelihoods, length-normalised, with the likelihood the sum of the estimator's per-token
contributions (GDPO's ELBO with rl.likelihood=elbo, Σ w·logp under SML). What sets GDPO apart is
the likelihood estimator and its advantages A = r − mean (rl.advantage / rl.normalize_adv_std), and
token-level ε rather than GSPO's 3e-4, none of which lives in the objective, so ``"gdpo"`` is another
name of ``"gspo"`` (``Method.aliases``).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from daca_jax.contracts import PolicyBatch
from daca_jax.rl.methods.base import Aux, LossOptions, Method, clipped_surrogate, k3_kl, objective, sequence_advantages_only, token_mean


@objective("gspo")
def gspo_loss(logp: jax.Array, batch: PolicyBatch, *,
              clip_eps: float = LossOptions.clip_eps,
              beta: float = LossOptions.beta) -> tuple[jax.Array, Aux]:
  """GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization"), sequence-level clipping.

  ``s_b = exp(Σ_i m w (logp − logp_old) / Σ_i m)`` (the length-normalised sequence ratio; with credit
  weights of mean 1 the weighted mean log-ratio), ``loss = mean_b −min(s_b A_b, clip(s_b, 1±ε) A_b)``
  + β·k3-KL token mean. GSPO uses much smaller ε than token-level PPO (the paper: 3e-4 / 4e-4).
  Also ``rl.objective="gdpo"`` (module docstring).

  Returns:
    (scalar loss, aux with "kl", "pg_loss", "clip_frac", "ratio_mean").
  Raises:
    ValueError: ``batch.token_advantages`` is set (a sequence-level objective).
  """
  sequence_advantages_only(batch, "gspo (or its alias gdpo)")
  m = batch.mask
  n = jnp.maximum(jnp.sum(m, -1), 1.0)
  log_ratio = jnp.sum(m * batch.weights * (logp - batch.logp_old), -1) / n  # [B]
  ratio = jnp.exp(log_ratio)
  surrogate, binding = clipped_surrogate(ratio, batch.advantages, clip_eps)
  pg = jnp.mean(-surrogate)
  kl = token_mean(k3_kl(logp, batch.logp_ref), m)
  loss = pg + beta * kl
  aux = {"pg_loss": pg, "kl": kl, "clip_frac": jnp.mean(binding.astype(jnp.float32)),
         "ratio_mean": jnp.mean(ratio)}
  return loss, aux


METHOD = Method(gspo_loss, aliases=("gdpo",))
