"""Forward (masking) process of masked diffusion with the linear schedule (LLaDA, MDLM).

At time t in (0, 1] each completion token is independently replaced by ``[MASK]`` with probability t;
the prompt is never masked. Times are stratified across the batch (one draw per quantile) for lower
variance of the SFT loss.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def stratified_times(key: jax.Array, batch: int, eps: float = 1e-3) -> jax.Array:
  """One t per sequence, stratified over (eps, 1].

  Returns:
    float32 [batch]: ``t_b = eps + (1 - eps) * (b + u_b) / batch`` in a random order.
  """
  k_u, k_perm = jax.random.split(key)
  u = jax.random.uniform(k_u, (batch,), jnp.float32)
  t = (jnp.arange(batch, dtype=jnp.float32) + u) / batch
  t = jax.random.permutation(k_perm, t)
  return eps + (1.0 - eps) * t


def mask_completion(key: jax.Array, tokens: jax.Array, prompt_len: int, t: jax.Array,
                    mask_id: int) -> tuple[jax.Array, jax.Array]:
  """Masks each completion token with probability ``t`` (per sequence); the prompt stays intact.

  Args:
    key: PRNG key.
    tokens: int32 [B, P+L].
    prompt_len: P (static).
    t: float32 [B] masking rates.
    mask_id: the ``[MASK]`` id.
  Returns:
    (noisy tokens int32 [B, P+L], masked bool [B, L] over completion positions).
  """
  comp = tokens[:, prompt_len:]
  masked = jax.random.uniform(key, comp.shape) < t[:, None]
  noisy = jnp.where(masked, mask_id, comp)
  return jnp.concatenate([tokens[:, :prompt_len], noisy], axis=1), masked
