"""ELBO likelihood of GDPO (Rojas et al. 2025, "Group Diffusion Policy Optimization").

The masked-diffusion evidence lower bound of the completion,
``ELBO(o) = E_t[(1/t) Σ_i 1[o_i masked in y_t] log p_θ(o_i | y_t)]``, estimated with t at the n
Gauss–Legendre nodes of [0, 1] (weights w_n, Σ w_n = 1) and one mask draw per node. The per-token
contribution is ``c_i = Σ_n w_n (1/t_n) 1[masked_n,i] log p_n,i``; ``Σ_i c_i`` is the sequence ELBO.
The estimator returns the n passes' log-probs as targets with their factors ``w_n / t_n``
(:class:`~daca_jax.contracts.TokenScores` of kind ``"elbo"``; ``contributions()`` gives ``c``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.contracts import TokenScores
from daca_jax.likelihood.base import EstimatorOptions, estimator, split_key
from daca_jax.likelihood.common import mask_prompt, score_targets
from daca_jax.likelihood.passes import per_pass
from daca_jax.config.checks import _check_fields, _positive


@dataclasses.dataclass(frozen=True)
class ELBOConfig:
  """GDPO's ELBO estimator (``rl.likelihood="elbo"``, :mod:`daca_jax.likelihood.elbo`).

  Attributes:
    nodes: Gauss–Legendre nodes in t (GDPO uses 2–3).
  """

  nodes: int = 2

  def validate(self, prefix: str = "likelihood.elbo") -> "ELBOConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "nodes")
    return self


def gauss_legendre_01(n: int) -> tuple[np.ndarray, np.ndarray]:
  """Nodes and weights of n-point Gauss–Legendre quadrature on [0, 1] (weights sum to 1)."""
  x, w = np.polynomial.legendre.leggauss(n)
  return ((x + 1.0) / 2.0).astype(np.float32), (w / 2.0).astype(np.float32)


@estimator("elbo")
def elbo_logprobs(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array,
                  *, mask_id: int, elbo: ELBOConfig = ELBOConfig(),
                  p_mask_prompt: float = EstimatorOptions.p_mask_prompt) -> TokenScores:
  """ELBO targets of the n quadrature passes (kind ``"elbo"``, S = n; ``contributions()`` [B, L] are
  the per-token ELBO terms, whose row sum is the sequence ELBO); n forward passes."""
  prompt, comp, nodes, weights, masked = _plan(tokens, prompt_len, key, mask_id, elbo, p_mask_prompt)

  def one_node(mk: jax.Array) -> jax.Array:
    x = jnp.concatenate([prompt, jnp.where(mk, mask_id, comp)], axis=1)
    return score_targets(logits_fn, params, x, comp, prompt_len, mask_id)

  return _node_scores(jax.vmap(one_node)(masked), nodes, weights, masked)  # [n, B, L] passes


def _plan(tokens: jax.Array, prompt_len: int, key: jax.Array, mask_id: int, elbo: ELBOConfig,
          p_mask_prompt: float):
  """(masked prompt [B, P], completion [B, L], nodes [n], weights [n], masks bool [n, B, L]) under
  ``key``: what every node's pass shares."""
  k_prompt, k_est = split_key(key)
  b, total = tokens.shape
  nodes, weights = gauss_legendre_01(elbo.nodes)
  prompt = mask_prompt(k_prompt, tokens[:, :prompt_len], p_mask_prompt, mask_id)
  masked = jax.random.uniform(k_est, (len(nodes), b, total - prompt_len)) < jnp.asarray(nodes)[:, None, None]
  return prompt, tokens[:, prompt_len:], nodes, weights, masked


def _node_scores(per_node: jax.Array, nodes: np.ndarray, weights: np.ndarray, masked: jax.Array) -> TokenScores:
  n, b, length = per_node.shape
  scale = jnp.broadcast_to(jnp.asarray(weights / nodes)[:, None, None], per_node.shape)
  flat = lambda x: jnp.transpose(x, (1, 0, 2)).reshape(b, n * length)
  return TokenScores(logp=flat(per_node), mask=flat(masked.astype(jnp.float32)), weight=flat(scale),
                     num_states=n, kind="elbo")


@per_pass("elbo", lambda cfg: cfg.elbo.nodes)
def elbo_one_node(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array,
                  *, mask_id: int, pass_index: jax.Array, elbo: ELBOConfig = ELBOConfig(),
                  p_mask_prompt: float = EstimatorOptions.p_mask_prompt) -> tuple[TokenScores, jax.Array]:
  """GDPO's node ``pass_index`` alone (:mod:`daca_jax.likelihood.passes`): its targets' log-probs (0
  at the other nodes) and bool [B, n·L] those targets; one forward pass."""
  prompt, comp, nodes, weights, masked = _plan(tokens, prompt_len, key, mask_id, elbo, p_mask_prompt)
  mk = jax.lax.dynamic_index_in_dim(masked, pass_index, keepdims=False)
  x = jnp.concatenate([prompt, jnp.where(mk, mask_id, comp)], axis=1)
  lp = score_targets(logits_fn, params, x, comp, prompt_len, mask_id)
  n, b, length = masked.shape
  here = jnp.broadcast_to(jnp.arange(n * length)[None] // length == pass_index, (b, n * length))
  return _node_scores(jnp.zeros(masked.shape, jnp.float32).at[pass_index].set(lp), nodes, weights, masked), here
