"""Remasking rules: the score by which the sampler picks which candidate tokens to commit.

Registry ``REMASKING`` (config field ``rollout.remasking``). Each rule maps
``(probs_of_candidates [B, L] float32, key) -> score [B, L] float32``; the sampler commits the
highest-scoring still-masked positions of the current block. Matches LLaDA's ``generate.py``:
"low_confidence" uses the model probability of the sampled candidate, "random" a uniform draw.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from daca_jax.registry import Registry

RemaskFn = Callable[[jax.Array, jax.Array], jax.Array]
REMASKING: Registry[RemaskFn] = Registry("remasking rule", "rollout.remasking")


@REMASKING.register("low_confidence")
def low_confidence(cand_prob: jax.Array, key: jax.Array) -> jax.Array:
  """Score = p(x0_i) under the (untempered) model distribution: commit the most confident first."""
  del key
  return cand_prob


@REMASKING.register("random")
def random_remasking(cand_prob: jax.Array, key: jax.Array) -> jax.Array:
  """Score ~ U[0, 1): commit uniformly random masked positions."""
  return jax.random.uniform(key, cand_prob.shape, jnp.float32)
