"""Policy-gradient objectives of the base methods (DESIGN §8), composable with any credit and likelihood.

Every objective has the signature ``fn(logp [B, L], batch: PolicyBatch, cfg: RLConfig) -> (loss, aux)``
where ``logp`` are the current policy's per-token log-probs (differentiable) and ``batch`` carries the
stop-gradient quantities of the rollout. Registry ``OBJECTIVES`` (config field ``rl.objective``).
"""
from __future__ import annotations

from typing import Callable

import flax.struct
import jax
import jax.numpy as jnp

from daca_jax.registry import Registry
from daca_jax.types import RLConfig


@flax.struct.dataclass
class PolicyBatch:
  """Stop-gradient inputs of an objective.

  Attributes:
    logp_old: float32 [B, L] log-probs under θ_old (the rollout policy), same masks as ``logp``.
    logp_ref: float32 [B, L] log-probs under the frozen reference policy, same masks.
    advantages: float32 [B] sequence advantages.
    weights: float32 [B, L] credit weights (0 outside the completion mask).
    mask: float32 [B, L] completion mask (1 up to and including the first EOS).
  """

  logp_old: jax.Array
  logp_ref: jax.Array
  advantages: jax.Array
  weights: jax.Array
  mask: jax.Array


ObjectiveFn = Callable[[jax.Array, PolicyBatch, RLConfig], tuple[jax.Array, dict[str, jax.Array]]]
OBJECTIVES: Registry[ObjectiveFn] = Registry("objective", "rl.objective")


def k3_kl(logp: jax.Array, logp_ref: jax.Array) -> jax.Array:
  """Schulman's k3 estimator of KL(π_θ || π_ref) per token: ``exp(r) − r − 1`` with r = logp_ref − logp."""
  r = logp_ref - logp
  return jnp.exp(r) - r - 1.0


@OBJECTIVES.register("diffu_grpo")
def diffu_grpo_loss(logp: jax.Array, batch: PolicyBatch,
                    cfg: RLConfig) -> tuple[jax.Array, dict[str, jax.Array]]:
  """diffu-GRPO (d1, Zhao et al. 2025, Eq. 3) with token credit.

  Per token: ``ρ = exp(logp − logp_old)``, ``Â = w·A``,
  ``ℓ = −min(ρ Â, clip(ρ, 1−ε, 1+ε) Â) + β·k3(logp, logp_ref)``; the loss is the token mean over the
  batch, ``Σ m ℓ / Σ m``.

  Returns:
    (scalar loss, aux with "kl", "clip_frac", "ratio_mean", "pg_loss").
  """
  m = batch.mask
  denom = jnp.maximum(jnp.sum(m), 1.0)
  ratio = jnp.exp(logp - batch.logp_old)
  adv = batch.advantages[:, None] * batch.weights
  unclipped = ratio * adv
  clipped = jnp.clip(ratio, 1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps) * adv
  pg = -jnp.minimum(unclipped, clipped)
  kl = k3_kl(logp, batch.logp_ref)
  per_token = pg + cfg.beta * kl
  loss = jnp.sum(per_token * m) / denom
  aux = {
      "pg_loss": jnp.sum(pg * m) / denom,
      "kl": jnp.sum(kl * m) / denom,
      "clip_frac": jnp.sum((clipped < unclipped).astype(jnp.float32) * m) / denom,
      "ratio_mean": jnp.sum(ratio * m) / denom,
  }
  return loss, aux
