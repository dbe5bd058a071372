"""RLDF state likelihood (Reinforcement Learning from Denoising Feedback; TraceRL family).

Instead of scoring the finished completion under a synthetic mask, RLDF rebuilds k of the rollout's
own intermediate states and scores, in each, every still-masked position against the final tokens:

* state before step s: ``x_s = [MASK] where commit_step >= s, else the final token``;
* which steps: sampled per sequence without replacement, with probability ∝
  ``softmax(surprisal_s / T)``, ``surprisal_s`` the mean ``−log p`` of the tokens committed at step s
  (their ``commit_conf``); ``rldf.sampling="uniform"`` and ``"topk"`` are the T → ∞ and T → 0
  limits (Gumbel-top-k on the scaled surprisals, on zeros, or no noise). Steps that committed no
  valid token are picked last.
* targets: every position masked in ``x_s``, i.e. ``commit_step >= s`` — the tokens committed at s
  and all later ones. The objective ``rldf`` applies the clean-state clip (drop targets whose
  probability under the rollout policy is below ``rl.rldf.tau`` unless committed at s).

Cost: k forward passes (vectorised with ``jax.vmap``, or ``lax.map`` in groups of
``strata_batch``). The output flattens (state, position) pairs so that every token-level objective
applies unchanged (:class:`~daca_jax.contracts.TokenScores`): ``logp [B, k·L]`` with index ``j·L + i`` for
state j and position i.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from daca_jax.contracts import TokenScores
from daca_jax.likelihood.base import EstimatorOptions, estimator, split_key
from daca_jax.likelihood.common import check_steps, mask_prompt, score_targets
from daca_jax.config.checks import _check_fields, _one_of, _positive
from daca_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class RLDFConfig:
  """RLDF's state sampling (``rl.likelihood="rldf"``, :mod:`daca_jax.likelihood.rldf`).

  Attributes:
    states: k, rollout states rebuilt per sequence (one pass each).
    sampling: how the k states are picked: "softmax" (probability ∝ softmax of each step's mean
      surprisal / temperature, without replacement), "uniform", or "topk" (the k most surprising
      steps).
    temperature: T of the "softmax" state sampling.
  """

  states: int = 4
  sampling: str = "softmax"
  temperature: float = 1.0

  def validate(self, prefix: str = "likelihood.rldf") -> "RLDFConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "states")
    if not self.temperature > 0:
      raise ConfigError(f"{prefix}.temperature", self.temperature, "a number > 0")
    _one_of(prefix, self, "sampling", ("softmax", "uniform", "topk"))
    return self


def step_surprisal(commit_step: jax.Array, commit_conf: jax.Array, valid: jax.Array,
                   steps: int) -> tuple[jax.Array, jax.Array]:
  """Mean surprisal of the valid tokens committed at each step.

  Args:
    commit_step: int32 [B, L]; commit_conf: float32 [B, L]; valid: float32 [B, L].
    steps: S.
  Returns:
    (surprisal float32 [B, S] in nats, count float32 [B, S] of valid tokens committed per step).
  """
  onehot = jax.nn.one_hot(commit_step, steps, dtype=jnp.float32) * valid[..., None]  # [B, L, S]
  nll = -jnp.log(jnp.maximum(commit_conf, 1e-30))
  count = jnp.sum(onehot, axis=1)
  return jnp.einsum("bl,bls->bs", nll, onehot) / jnp.maximum(count, 1.0), count


def sample_states(key: jax.Array, surprisal: jax.Array, count: jax.Array, k: int, sampling: str,
                  temperature: float) -> jax.Array:
  """k distinct steps per sequence (int32 [B, k]), in decreasing order of their sampling score.

  ``softmax``: Gumbel-top-k of ``surprisal / T`` — sampling without replacement with probability
  ∝ softmax(surprisal / T). ``uniform``: Gumbel-top-k of zeros. ``topk``: the k largest surprisals
  (ties → earlier step). Steps with ``count == 0`` rank below every other step.
  """
  if sampling == "topk":
    score = surprisal
  else:
    gumbel = jax.random.gumbel(key, surprisal.shape, jnp.float32)
    score = gumbel + (surprisal / temperature if sampling == "softmax" else 0.0)
  score = jnp.where(count > 0, score, -1e30 + score * 0.0)
  order = jnp.argsort(-score, axis=-1, stable=True)
  return order[:, :k].astype(jnp.int32)


@estimator("rldf")
def rldf_logprobs(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array,
                  *, mask_id: int, commit_step: jax.Array | None = None,
                  commit_conf: jax.Array | None = None,
                  completion_mask: jax.Array | None = None, rldf: RLDFConfig = RLDFConfig(),
                  trajectory_steps: int = EstimatorOptions.trajectory_steps,
                  p_mask_prompt: float = EstimatorOptions.p_mask_prompt,
                  strata_batch: int = EstimatorOptions.strata_batch) -> TokenScores:
  """Log-probs of the final tokens at k rebuilt rollout states.

  Args:
    tokens: int32 [B, P+L] rollout sequences.
    key: PRNG key: prompt mask and state sampling (the same key gives the same states for θ,
      θ_old and θ_ref).
    rldf: ``states`` k, ``sampling``, ``temperature`` (``likelihood.rldf``).
    trajectory_steps: S (> 0; the learner sets it to ``rollout.steps``).
    p_mask_prompt, strata_batch: as in :class:`~daca_jax.config.likelihood.LikelihoodConfig`.
    commit_step, commit_conf: int32 / float32 [B, L] from the Trajectory.
    completion_mask: float32 [B, L] (all ones if None).
  Returns:
    :class:`~daca_jax.contracts.TokenScores` with S = k contexts: ``logp [B, k·L]``
    ``log p_θ(o_i | x_{s_j})`` at ``j·L + i``, ``mask`` 1 where position i is masked in state j (a
    target), ``committed_here`` 1 where it was committed at step s_j, ``states [B, k]`` the s_j.
  Raises:
    ValueError: a Trajectory field is missing, S unset, or k > S.
  """
  steps, k = trajectory_steps, rldf.states
  check_steps("rldf", {"commit_step": commit_step, "commit_conf": commit_conf}, steps, "likelihood.rldf.states", k)
  valid = jnp.ones(commit_step.shape, jnp.float32) if completion_mask is None else completion_mask
  k_prompt, k_states = split_key(key)
  prompt = mask_prompt(k_prompt, tokens[:, :prompt_len], p_mask_prompt, mask_id)
  comp = tokens[:, prompt_len:]
  surprisal, count = step_surprisal(commit_step, commit_conf, valid, steps)
  states = sample_states(k_states, surprisal, count, k, rldf.sampling, rldf.temperature)

  def at_state(s: jax.Array) -> jax.Array:  # s: int32 [B], one step per row
    x = jnp.concatenate([prompt, jnp.where(commit_step >= s[:, None], mask_id, comp)], axis=1)
    return score_targets(logits_fn, params, x, comp, prompt_len, mask_id)

  cols = states.T  # [k, B]
  if strata_batch and strata_batch < k:
    per_state = jax.lax.map(at_state, cols, batch_size=strata_batch)
  else:
    per_state = jax.vmap(at_state)(cols)  # [k, B, L]
  b, length = comp.shape
  masked = (commit_step[None] >= cols[:, :, None]).astype(jnp.float32)
  here = (commit_step[None] == cols[:, :, None]).astype(jnp.float32)
  flat = lambda x: jnp.transpose(x, (1, 0, 2)).reshape(b, k * length)
  return TokenScores(logp=flat(per_state), mask=flat(masked), committed_here=flat(here), states=states,
                     num_states=k)
