"""Mean-field likelihood of diffu-GRPO (d1; Zhao et al. 2025, "d1: Scaling Reasoning in Diffusion LLMs").

One forward pass with the whole completion masked (and each prompt token masked with probability
``p_mask_prompt``): ``logp_i = log p_θ(o_i | q̃, [MASK]^L)``. Cheap but biased: every token is scored
with no completion context.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from daca_jax.likelihood.base import EstimatorOptions, estimator, split_key
from daca_jax.likelihood.common import mask_prompt, score_targets


@estimator("mean_field")
def mean_field_logprobs(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int,
                        key: jax.Array, *, mask_id: int,
                        p_mask_prompt: float = EstimatorOptions.p_mask_prompt) -> jax.Array:
  """Per-token mean-field log-probs.

  Args:
    logits_fn: pure ``(params, tokens[B, T]) -> logits[B, T, V]``.
    tokens: int32 [B, P+L] rollout sequences.
    prompt_len: P (static).
    key: PRNG key (prompt mask).
    p_mask_prompt: share of prompt tokens masked (``likelihood.p_mask_prompt``).
    mask_id: ``[MASK]`` id.
  Returns:
    float32 [B, L] (the registered estimator returns it as :class:`~daca_jax.contracts.TokenScores`).
  """
  k_prompt, _ = split_key(key)
  prompt = mask_prompt(k_prompt, tokens[:, :prompt_len], p_mask_prompt, mask_id)
  comp = tokens[:, prompt_len:]
  x = jnp.concatenate([prompt, jnp.full_like(comp, mask_id)], axis=1)
  return score_targets(logits_fn, params, x, comp, prompt_len, mask_id)
