"""A tiny fixed-logit "model" with both a JAX and a numpy implementation, for oracle tests.

logits[b, t] = A[t] + C[x[b, t]] + mean_u E[x[b, u]]  — depends on the position, the token there and
(bidirectionally) on the whole sequence, so committing tokens changes every other prediction.
"""
import jax.numpy as jnp
import numpy as np


def make_params(seq_len: int, vocab: int, seed: int = 0, scale: float = 2.0) -> dict:
  rng = np.random.default_rng(seed)
  return {"A": (scale * rng.standard_normal((seq_len, vocab))).astype(np.float32),
          "C": (scale * rng.standard_normal((vocab, vocab))).astype(np.float32),
          "E": (scale * rng.standard_normal((vocab, vocab))).astype(np.float32)}


def jax_logits(params, tokens):
  a, c, e = params["A"], params["C"], params["E"]
  return a[None, : tokens.shape[1]] + c[tokens] + jnp.mean(e[tokens], axis=1, keepdims=True)


def np_logits(params, tokens):
  a, c, e = (np.asarray(params[k], np.float64) for k in "ACE")
  return a[None, : tokens.shape[1]] + c[tokens] + e[tokens].mean(axis=1, keepdims=True)
