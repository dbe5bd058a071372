"""Exact any-order log-likelihood of a short completion under a masked diffusion LM (oracle).

A masked diffusion LM defines, for every generation order σ of the L completion positions,
``p_σ(o) = Π_t p_θ(o_σt | q, o_σ<t)`` (positions not yet generated are ``[MASK]``). The any-order
likelihood is the average over orders, ``log p(o) = log E_σ p_σ(o) = log (1/L!) Σ_σ p_σ(o)`` (the
quantity the ELBO bounds and the estimators approximate). The sum over the L! orders is computed
exactly by dynamic programming over the 2^L sets of revealed positions:
``F(∅) = 1``, ``F(S) = Σ_{i∈S} F(S∖{i}) · p_θ(o_i | q, o_{S∖{i}})``, ``log p(o) = log F(full) − log L!``,
one forward pass per set (2^L passes of batch B), differentiable in θ. For oracle use with L ≤ 12.
"""
from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.contracts import as_model_fns, call_logits, check_tokens
from daca_jax.likelihood.common import policy_ids, token_logprobs

MAX_EXACT_LENGTH = 12


def any_order_logprob(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, *,
                      mask_id: int, subset_batch: int = 0) -> jax.Array:
  """Exact ``log p(o)`` of each sequence's completion (float32 [B]).

  Args:
    logits_fn: pure ``(params, tokens[B, T]) -> logits[B, T, V]``.
    tokens: int32 [B, P+L], prompt then completion; every completion token counts (no EOS cut).
    prompt_len: P (static).
    mask_id: ``[MASK]`` id.
    subset_batch: evaluate this many revealed-sets per ``lax.map`` step (0: all at once).
  Raises:
    ValueError: L > 12 (2^L forward passes).
    ShapeError / ConfigError: ``tokens`` or ``prompt_len`` (:func:`daca_jax.contracts.check_tokens`),
      or logits not one row per position.
  """
  _, _, length = check_tokens(tokens, prompt_len)
  logits_fn = as_model_fns(logits_fn)
  if length > MAX_EXACT_LENGTH:
    raise ValueError(f"exact any-order likelihood needs L <= {MAX_EXACT_LENGTH}, got L={length}")
  n_sets = 1 << length
  visible = (np.arange(n_sets)[:, None] >> np.arange(length)[None, :]) & 1  # [2^L, L] set S as bits
  comp = tokens[:, prompt_len:]

  def logp_given(vis: jax.Array) -> jax.Array:  # [L] bits -> [B, L] log p(o_i | q, o_S)
    x = jnp.concatenate([tokens[:, :prompt_len], jnp.where(vis[None, :] > 0, comp, mask_id)], axis=1)
    logits = call_logits(logits_fn, params, x)[0][:, prompt_len:]
    return token_logprobs(logits, comp, policy_ids(logits_fn, params, logits.shape[-1], mask_id))

  vis = jnp.asarray(visible, jnp.int32)
  if subset_batch:
    lp = jax.lax.map(logp_given, vis, batch_size=subset_batch)
  else:
    lp = jax.vmap(logp_given)(vis)  # [2^L, B, L]
  log_f = [None] * n_sets
  log_f[0] = jnp.zeros(tokens.shape[0], jnp.float32)
  for s in sorted(range(1, n_sets), key=lambda m: bin(m).count("1")):
    terms = [log_f[s ^ (1 << i)] + lp[s ^ (1 << i), :, i] for i in range(length) if s >> i & 1]
    log_f[s] = jax.nn.logsumexp(jnp.stack(terms), axis=0)
  return log_f[n_sets - 1] - math.lgamma(length + 1)
