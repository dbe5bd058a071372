"""diffu-GRPO, d1's policy gradient (Zhao et al. 2025, "d1: Scaling Reasoning in Diffusion Large Language
Models via Reinforcement Learning", Eq. 3; dllm-reasoning/d1 ``diffu-grpo/diffu_grpo_trainer.py``): the
token-level clipped ratio with a k3 KL to the reference, over any credit and likelihood."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from daca_jax.contracts import PolicyBatch
from daca_jax.rl.methods.base import Aux, LossOptions, Method, clipped_surrogate, k3_kl, objective, token_advantages


@objective("diffu_grpo")
def diffu_grpo_loss(logp: jax.Array, batch: PolicyBatch, *,
                    clip_eps: float = LossOptions.clip_eps,
                    beta: float = LossOptions.beta) -> tuple[jax.Array, Aux]:
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


METHOD = Method(diffu_grpo_loss, token_advantages=True, pass_local=True)
