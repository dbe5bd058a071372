"""LLaDA's supervised fine-tuning loss for masked diffusion LMs (Nie et al. 2025, Eq. for SFT).

``loss = mean_b [ (1 / L) * sum_{i masked} -log p_theta(o_i | x_t) / t_b ]`` — cross-entropy on masked
completion positions, weighted by 1/t (the ELBO weight of the linear schedule), normalised by the
completion length L (the answer length including EOS padding, as LLaDA's SFT does). The prompt is
never masked.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from daca_jax.contracts import as_model_fns, call_logits, check_tokens
from daca_jax.diffusion.schedule import mask_completion, stratified_times
from daca_jax.diffusion.logprob import token_logprobs


def sft_loss(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array,
             mask_id: int) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Masked-diffusion SFT loss.

  Args:
    logits_fn: pure ``(params, tokens[B, T]) -> logits[B, T, V]``.
    params: model parameters.
    tokens: int32 [B, P+L] prompt followed by the target completion (EOS-padded).
    prompt_len: P (static).
    key: PRNG key for t and the masks.
    mask_id: the ``[MASK]`` id.
  Returns:
    (scalar float32 loss, {"masked_fraction", "token_acc"}).
  Raises:
    ShapeError: ``tokens`` not an integer ``[B, P+L]`` array, or logits not one row per position.
    ConfigError: ``prompt_len`` not a static int in ``[0, P+L-1]``.
  """
  b, _, gen_len = check_tokens(tokens, prompt_len)
  k_t, k_m = jax.random.split(key)
  t = stratified_times(k_t, b)
  noisy, masked = mask_completion(k_m, tokens, prompt_len, t, mask_id)
  logits = call_logits(as_model_fns(logits_fn), params, noisy)[0][:, prompt_len:]
  target = tokens[:, prompt_len:]
  logp = token_logprobs(logits, target)  # [B, L]
  m = masked.astype(jnp.float32)
  per_seq = jnp.sum(-logp * m, axis=1) / t / gen_len
  loss = jnp.mean(per_seq)
  correct = (jnp.argmax(logits, -1) == target).astype(jnp.float32)
  aux = {"masked_fraction": jnp.mean(m),
         "token_acc": jnp.sum(correct * m) / jnp.maximum(jnp.sum(m), 1.0)}
  return loss, aux
