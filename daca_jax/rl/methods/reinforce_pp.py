"""REINFORCE++ (Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models"):
no critic, no group baseline, token-level PPO clip, the KL folded into the reward."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from daca_jax.contracts import PolicyBatch
from daca_jax.rl.methods.base import Aux, LossOptions, Method, clipped_surrogate, objective, sequence_advantages_only, token_mean


@objective("reinforce_pp")
def reinforce_pp_loss(logp: jax.Array, batch: PolicyBatch, *,
                      clip_eps: float = LossOptions.clip_eps) -> tuple[jax.Array, Aux]:
  """REINFORCE++ (Hu 2025): no critic, no group baseline, token-level PPO clip.

  Per token ``ℓ = −min(ρ wA, clip(ρ, 1±ε) wA)``, token mean over the batch; no KL term in the loss:
  REINFORCE++ folds the KL into the reward, which its advantage estimator does
  (:func:`daca_jax.rl.advantages.reinforce_pp_advantages`, ``rl.advantage="reinforce_pp"``, the
  default for this objective), so ``batch.advantages`` arrive already KL-shaped and batch-normalised.

  Returns:
    (scalar loss, aux with "kl" (the k1 KL token mean of the rollout policy), "pg_loss",
    "clip_frac", "ratio_mean").
  """
  sequence_advantages_only(batch, "reinforce_pp")
  m = batch.mask
  ratio = jnp.exp(logp - batch.logp_old)
  surrogate, binding = clipped_surrogate(ratio, batch.advantages[:, None] * batch.weights, clip_eps)
  pg = token_mean(-surrogate, m)
  aux = {"pg_loss": pg, "kl": token_mean(batch.logp_old - batch.logp_ref, m),
         "clip_frac": token_mean(binding.astype(jnp.float32), m),
         "ratio_mean": token_mean(ratio, m)}
  return pg, aux


METHOD = Method(reinforce_pp_loss, pass_local=True, advantage="reinforce_pp",
                sequence_reason="its advantages are REINFORCE++'s own KL-shaped, batch-whitened sequence advantages")
