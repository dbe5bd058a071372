"""Coupled-sampling likelihood of DiffuCoder's coupled-GRPO (Gong et al. 2025, arXiv 2506.20639).

A masking rate t ~ U[t_min, t_max] is drawn per sequence; a random mask M at rate t over the completion
and its complement Mᶜ give two passes, so every completion token is masked — and scored — in exactly
one of them. The token's estimate is its log-prob in that pass weighted by the ELBO factor of the pass,
``1/t`` for M and ``1/(1−t)`` for Mᶜ; with ``coupled.full_pass`` it is averaged with the fully-masked
(mean-field) log-prob: ``(logp_full + weighted) / 2`` — DiffuCoder's ``selective_log_softmax``.
DiffuCoder draws one t per batch; here t is drawn per sequence. The estimator returns the passes'
log-probs as targets with these factors (:class:`~daca_jax.contracts.TokenScores` of kind ``"elbo"``;
``contributions()`` gives the per-token estimate above).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from daca_jax.contracts import TokenScores
from daca_jax.likelihood.base import EstimatorOptions, estimator, split_key
from daca_jax.likelihood.common import mask_prompt, score_targets
from daca_jax.config.checks import _check_fields
from daca_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class CoupledConfig:
  """DiffuCoder's coupled estimator (``rl.likelihood="coupled"``, :mod:`daca_jax.likelihood.coupled`).

  Attributes:
    t_min: lower end of the masking rate t ~ U[t_min, t_max].
    t_max: upper end of that range (DiffuCoder: [0.2, 0.8]).
    full_pass: also run the fully-masked pass and average it in (DiffuCoder does).
  """

  t_min: float = 0.2
  t_max: float = 0.8
  full_pass: bool = True

  def validate(self, prefix: str = "likelihood.coupled") -> "CoupledConfig":
    _check_fields(prefix, self)
    if not 0.0 < self.t_min <= self.t_max < 1.0:
      raise ConfigError(f"{prefix}.t_min", self.t_min, f"0 < t_min <= t_max={self.t_max} < 1")
    return self


def coupled_masks(key: jax.Array, batch: int, length: int, t_min: float,
                  t_max: float) -> tuple[jax.Array, jax.Array]:
  """(t float32 [B], in_first bool [B, L]): the rate and the mask M of the first pass (Mᶜ is ~M)."""
  k_t, k_m = jax.random.split(key)
  t = jax.random.uniform(k_t, (batch,), jnp.float32, t_min, t_max)
  return t, jax.random.uniform(k_m, (batch, length)) < t[:, None]


@estimator("coupled")
def coupled_logprobs(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array,
                     *, mask_id: int, coupled: CoupledConfig = CoupledConfig(),
                     p_mask_prompt: float = EstimatorOptions.p_mask_prompt) -> TokenScores:
  """Coupled-sampling targets (kind ``"elbo"``, S = 2 passes, 3 with ``coupled.full_pass``;
  ``contributions()`` [B, L] are the per-token estimates); one forward pass per context."""
  k_prompt, k_est = split_key(key)
  b, total = tokens.shape
  length = total - prompt_len
  t, in_first = coupled_masks(k_est, b, length, coupled.t_min, coupled.t_max)
  prompt = mask_prompt(k_prompt, tokens[:, :prompt_len], p_mask_prompt, mask_id)
  comp = tokens[:, prompt_len:]
  masks = [in_first, ~in_first]
  if coupled.full_pass:
    masks.append(jnp.ones_like(in_first))
  xs = jnp.stack([jnp.concatenate([prompt, jnp.where(mk, mask_id, comp)], axis=1) for mk in masks])
  per_pass = jax.vmap(lambda x: score_targets(logits_fn, params, x, comp, prompt_len, mask_id))(xs)
  scale = [jnp.broadcast_to(1.0 / t[:, None], (b, length)), jnp.broadcast_to(1.0 / (1.0 - t[:, None]), (b, length))]
  if coupled.full_pass:  # (full + weighted) / 2
    scale = [0.5 * scale[0], 0.5 * scale[1], jnp.full((b, length), 0.5, jnp.float32)]
  cat = lambda xs: jnp.concatenate(list(xs), axis=1)  # context-major [B, S·L]
  return TokenScores(logp=cat(per_pass), mask=cat(m.astype(jnp.float32) for m in masks), weight=cat(scale),
                     num_states=len(masks), kind="elbo")
