"""Helpers shared by the likelihood estimators: target log-probs and prompt masking."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def token_logprobs(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """log softmax(logits)[target] without materialising the full log-softmax.

  Args:
    logits: [..., V] float (computed in float32).
    targets: int [...] target ids.
  Returns:
    float32 [...].
  """
  logits = logits.astype(jnp.float32)
  picked = jnp.take_along_axis(logits, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
  return picked - jax.nn.logsumexp(logits, axis=-1)


def mask_prompt(key: jax.Array, prompt: jax.Array, p_mask_prompt: float, mask_id: int) -> jax.Array:
  """Masks each prompt token independently with probability ``p_mask_prompt`` (d1's prompt masking).

  Args:
    prompt: int32 [B, P].
  Returns:
    int32 [B, P]; unchanged when ``p_mask_prompt == 0`` (static).
  """
  if p_mask_prompt <= 0.0:
    return prompt
  hit = jax.random.uniform(key, prompt.shape) < p_mask_prompt
  return jnp.where(hit, mask_id, prompt)
