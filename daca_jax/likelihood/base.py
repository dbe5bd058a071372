"""Likelihood-estimator interface and registry.

An estimator returns per-token log-probabilities ``logp [B, L] float32`` of a rollout's completion
tokens under ``params``. It takes a PRNG key that fixes its masks: the learner passes the **same key**
for θ, θ_old and θ_ref within an inner iteration and a new key per iteration.

Signature: ``fn(logits_fn, params, tokens[B, P+L], prompt_len, key, cfg, *, mask_id, commit_step=None)``.
"""
from __future__ import annotations

from typing import Callable

import jax

from daca_jax.registry import Registry

LikelihoodFn = Callable[..., jax.Array]
LIKELIHOOD: Registry[LikelihoodFn] = Registry("likelihood estimator", "rl.likelihood")


def split_key(key: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(prompt-mask key, estimator key): shared by all estimators so that, e.g., SML with K = 1 and
  mean-field draw the same prompt mask from the same key."""
  k_prompt, k_est = jax.random.split(key)
  return k_prompt, k_est


