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


def learner_rollout(cfg, vocab: int = 12, mask_id: int = 10, eos_id: int = 11, prompt_len: int = 3, rows: int = 8):
  """A learner of ``cfg`` over this model and one rollout of ``rows`` seeded prompts with seeded rewards:
  ``(params, learner, traj, rewards float32 [rows], credit weights)``."""
  import jax
  from daca_jax.rl.learner import GRPOLearner

  params = jax.tree.map(jnp.asarray, make_params(prompt_len + cfg.rollout.gen_length, vocab, seed=0, scale=1.0))
  learner = GRPOLearner(jax_logits, cfg, mask_id=mask_id, eos_id=eos_id)
  prompts = jnp.asarray(np.random.default_rng(0).integers(0, 9, (rows, prompt_len)), jnp.int32)
  traj = learner.rollout(params, prompts, jax.random.PRNGKey(0))
  rewards = jnp.asarray(np.random.default_rng(1).uniform(size=rows), jnp.float32)
  return params, learner, traj, rewards, learner.credit_weights(traj)
