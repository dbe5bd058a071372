"""Coupled-sampling likelihood of DiffuCoder's coupled-GRPO (Gong et al. 2025, arXiv 2506.20639).

A masking rate t ~ U[t_min, t_max] is drawn per sequence; a random mask M at rate t over the completion
and its complement Mᶜ give two passes, so every completion token is masked — and scored — in exactly
one of them. The token's estimate is its log-prob in that pass weighted by the ELBO factor of the pass,
``1/t`` for M and ``1/(1−t)`` for Mᶜ; with ``coupled_full_pass`` it is averaged with the fully-masked
(mean-field) log-prob: ``(logp_full + weighted) / 2`` — DiffuCoder's ``selective_log_softmax``.
DiffuCoder draws one t per batch; here t is drawn per sequence.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from daca_jax.likelihood.base import register_estimator, split_key
from daca_jax.likelihood.common import mask_prompt, score_targets
from daca_jax.types import LikelihoodConfig


def coupled_masks(key: jax.Array, batch: int, length: int, t_min: float,
                  t_max: float) -> tuple[jax.Array, jax.Array]:
  """(t float32 [B], in_first bool [B, L]): the rate and the mask M of the first pass (Mᶜ is ~M)."""
  k_t, k_m = jax.random.split(key)
  t = jax.random.uniform(k_t, (batch,), jnp.float32, t_min, t_max)
  return t, jax.random.uniform(k_m, (batch, length)) < t[:, None]


@register_estimator("coupled")
def coupled_logprobs(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array,
                     cfg: LikelihoodConfig, *, mask_id: int,
                     commit_step: jax.Array | None = None) -> jax.Array:
  """Per-token coupled estimates (float32 [B, L]); 2 forward passes (3 with ``coupled_full_pass``)."""
  del commit_step
  k_prompt, k_est = split_key(key)
  b, total = tokens.shape
  length = total - prompt_len
  t, in_first = coupled_masks(k_est, b, length, cfg.coupled_t_min, cfg.coupled_t_max)
  prompt = mask_prompt(k_prompt, tokens[:, :prompt_len], cfg.p_mask_prompt, mask_id)
  comp = tokens[:, prompt_len:]
  masks = [in_first, ~in_first]
  if cfg.coupled_full_pass:
    masks.append(jnp.ones_like(in_first))
  xs = jnp.stack([jnp.concatenate([prompt, jnp.where(mk, mask_id, comp)], axis=1) for mk in masks])
  per_pass = jax.vmap(lambda x: score_targets(logits_fn, params, x, comp, prompt_len, mask_id))(xs)
  weighted = jnp.where(in_first, per_pass[0] / t[:, None], per_pass[1] / (1.0 - t[:, None]))
  if cfg.coupled_full_pass:
    return 0.5 * (per_pass[2] + weighted)
  return weighted
