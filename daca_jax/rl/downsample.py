"""Rollout down-sampling: sample n completions per prompt, train on the m most informative.

Rollouts are cheap next to the update (a 64-row batch of the main job: a median 0.75 s of rollout
against 2 s of update on a 2-core CPU), and a group whose rewards barely differ gives GRPO almost
no signal. PODS (Xu et al. 2025, "Not All Rollouts are Useful: Down-Sampling Rollouts in LLM
Reinforcement Learning") samples n > m completions per prompt and updates on the m whose rewards
have the largest variance. Their Lemma: among all m-subsets of a group, a maximum-variance one
consists of the k largest and the m − k smallest rewards for some k in [0, m], so an exact search
needs only m + 1 candidates after one sort.

Config: ``rl.sample_group_size`` (n; 0 = ``rl.group_size``, no down-sampling) and
``rl.downsample`` (``"max_variance"`` or ``"random"``, the control with the same batch sizes).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.contracts import Trajectory
from daca_jax.config.checks import DOWNSAMPLE_RULES


def _candidate_slots(n: int, m: int) -> np.ndarray:
  """int32 [m + 1, m]: for each k, the sorted positions of the m − k smallest and k largest."""
  return np.stack([np.concatenate([np.arange(m - k), np.arange(n - k, n)]) for k in range(m + 1)]).astype(np.int32)


def max_variance_subset(rewards: jax.Array, m: int) -> jax.Array:
  """Indices of a maximum-variance m-subset of every group (PODS, Xu et al. 2025, Lemma).

  Args:
    rewards: float [P, n] rewards of P groups of n completions.
    m: completions kept per group, 1 <= m <= n.
  Returns:
    int32 [P, m] column indices into ``rewards`` (distinct within a row), in the order
    "m − k smallest, then k largest" of the best k (ties: the smallest k).
  Raises:
    ValueError: ``rewards`` not 2-D or m outside [1, n].
  """
  if rewards.ndim != 2:
    raise ValueError(f"max_variance_subset: rewards must be [P, n], got shape {tuple(rewards.shape)}")
  n = rewards.shape[1]
  if not 1 <= m <= n:
    raise ValueError(f"max_variance_subset: m={m} must be in [1, n={n}]")
  order = jnp.argsort(rewards, axis=-1, stable=True)  # [P, n] ascending
  sorted_r = jnp.take_along_axis(rewards, order, axis=-1).astype(jnp.float32)
  slots = jnp.asarray(_candidate_slots(n, m))  # [m + 1, m]
  cand = sorted_r[:, slots]  # [P, m + 1, m]
  best = jnp.argmax(jnp.var(cand, axis=-1), axis=-1)  # [P]; argmax takes the first (smallest k) tie
  return jnp.take_along_axis(order, slots[best], axis=-1).astype(jnp.int32)


def random_subset(key: jax.Array, num_groups: int, n: int, m: int) -> jax.Array:
  """int32 [P, m]: m distinct columns in [0, n) per group, uniformly at random (the control)."""
  if not 1 <= m <= n:
    raise ValueError(f"random_subset: m={m} must be in [1, n={n}]")
  u = jax.random.uniform(key, (num_groups, n))
  return jnp.argsort(u, axis=-1)[:, :m].astype(jnp.int32)


def select_rows(rewards: jax.Array, n: int, m: int, rule: str, key: jax.Array | None = None) -> jax.Array:
  """Rows of a rollout batch to train on.

  Args:
    rewards: float [P * n] rewards, groups of n adjacent rows.
    n: completions sampled per prompt; m: kept per prompt (``rl.group_size``).
    rule: one of :data:`DOWNSAMPLE_RULES`.
    key: PRNG key, used by ``"random"``.
  Returns:
    int32 [P * m] row indices into the batch, groups of m adjacent, each group's rows from its own
    prompt's n.
  Raises:
    ValueError: ``rewards`` is not a multiple of n long, m outside [1, n], an unknown rule, or
      ``"random"`` without a key.
  """
  rewards = jnp.asarray(rewards)
  if rewards.ndim != 1 or rewards.shape[0] % n:
    raise ValueError(f"select_rows: rewards must be [P * n] with n={n}, got shape {tuple(rewards.shape)}")
  groups = rewards.shape[0] // n
  if rule == "max_variance":
    cols = max_variance_subset(rewards.reshape(groups, n), m)
  elif rule == "random":
    if key is None:
      raise ValueError("select_rows: rule='random' needs a key")
    cols = random_subset(key, groups, n, m)
  else:
    raise ValueError(f"rl.downsample={rule!r} is not one of {list(DOWNSAMPLE_RULES)}")
  return (cols + n * jnp.arange(groups, dtype=jnp.int32)[:, None]).reshape(-1)


def take_rows(traj: Trajectory, rows: jax.Array) -> Trajectory:
  """The trajectory of the rows ``rows`` (int32 [B']) of ``traj``; per-step records ``[S, B, L]``
  are gathered on their batch axis, batch-free fields (``model_calls``, ``finished``) kept."""
  take = lambda x, axis=0: None if x is None else jnp.take(x, rows, axis=axis)
  return traj.replace(tokens=take(traj.tokens), completion_mask=take(traj.completion_mask),
                      commit_step=take(traj.commit_step), commit_conf=take(traj.commit_conf),
                      step_conf=take(traj.step_conf, 1), step_entropy=take(traj.step_entropy, 1),
                      commit_hidden=take(traj.commit_hidden))


__all__ = ["DOWNSAMPLE_RULES", "max_variance_subset", "random_subset", "select_rows", "take_rows"]
