"""wd1, ratio-free weighted likelihood (Tang et al. 2025, "wd1: Weighted Policy Optimization for Reasoning
in Diffusion Language Models"; xiaohangt/wd1)."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from daca_jax.contracts import PolicyBatch
from daca_jax.rl.methods.base import Aux, LossOptions, Method, k3_kl, objective, sequence_advantages_only, token_mean


@objective("wd1", per_group=True)
def wd1_loss(logp: jax.Array, batch: PolicyBatch, *,
             group_size: int = LossOptions.group_size,
             beta: float = LossOptions.beta) -> tuple[jax.Array, Aux]:
  """wd1 (Tang et al. 2025, "wd1: Weighted Policy Optimization for Reasoning in Diffusion LMs").

  Ratio-free weighted likelihood: with the sequence log-likelihood ``ℓ_b = Σ_i m w logp`` and, within
  each prompt's group of G, ``p⁺ = softmax(A)`` and ``p⁻ = softmax(−A)``,
  ``loss = mean_groups Σ_g (p⁻_g − p⁺_g) ℓ_g`` (+ β·k3-KL token mean when β > 0). No θ_old ratio.

  Returns:
    (scalar loss, aux with "kl", "pg_loss", "clip_frac" (0), "ratio_mean" (1)).
  """
  sequence_advantages_only(batch, "wd1")
  g = group_size
  seq = jnp.sum(batch.mask * batch.weights * logp, axis=-1).reshape(-1, g)  # [N, G]
  adv = batch.advantages.reshape(-1, g)
  coef = jax.nn.softmax(-adv, axis=-1) - jax.nn.softmax(adv, axis=-1)
  pg = jnp.mean(jnp.sum(coef * seq, axis=-1))
  kl = token_mean(k3_kl(logp, batch.logp_ref), batch.mask)
  loss = pg + beta * kl
  return loss, {"pg_loss": pg, "kl": kl, "clip_frac": jnp.zeros(()), "ratio_mean": jnp.ones(())}


METHOD = Method(wd1_loss, reads_old=False, pass_local=True)
