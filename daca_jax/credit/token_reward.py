"""Token-reward credit (``rl.credit="token_reward"``): per-token advantages from rewards the task
defines for individual completion tokens — an oracle of token credit, not a method.

Where a task's sequence reward is an average of per-token outcomes (4x4 Sudoku: d1's reward is the
fraction of blank cells that are right, i.e. the mean of the cells' correctness), each token can get
its own group-relative advantage instead of sharing the sequence's:

    A_{b,i} = r_{b,i} − mean_{g ∈ group(b), m_{g,i} = 1} r_{g,i}      (0 where m_{b,i} = 0)

with ``r`` the task's token rewards and ``m`` the mask of tokens that carry one (the blank cells; the
copied givens and the EOS padding carry none, so they get no policy-gradient signal). This is the
credit an omniscient assigner would give for that reward, so it bounds what DPS, DTCA and DelTA, which
see only the trajectory and the sequence reward, can reach. The reward itself is unchanged: the
sequence reward is still what is logged and evaluated.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from daca_jax.credit.base import CreditInputs, CreditOutput, credit_assigner
from daca_jax.contracts import Trajectory, check_shape
from daca_jax.config.rollout import RolloutConfig


def token_group_advantages(token_rewards: jax.Array, mask: jax.Array, group_size: int) -> jax.Array:
  """Per-token group-relative advantages.

  Args:
    token_rewards: float32 [B, L].
    mask: float32 [B, L], 1 where a token reward is defined.
    group_size: G; the G rollouts of a prompt are adjacent rows.
  Returns:
    float32 [B, L]: ``r − (mean of r over the group's rows that define position i)``, 0 where
    ``mask`` is 0. Within a group the advantages at each position sum to 0.
  Raises:
    ValueError: B is not a multiple of G.
    ShapeError: ``token_rewards`` not ``[B, L]`` or ``mask`` not of its shape.
  """
  b, length = check_shape("token_rewards", token_rewards, ("B", "L"), "[B, L] per-token rewards")
  check_shape("mask", mask, (b, length), "[B, L] like token_rewards")
  if b % group_size:
    raise ValueError(f"batch size {b} is not a multiple of rl.group_size={group_size}")
  r = token_rewards.reshape(b // group_size, group_size, length)
  m = mask.astype(jnp.float32).reshape(b // group_size, group_size, length)
  mean = jnp.sum(r * m, axis=1, keepdims=True) / jnp.maximum(jnp.sum(m, axis=1, keepdims=True), 1.0)
  return ((r - mean) * m).reshape(b, length)


@credit_assigner("token_reward", needs_token_rewards=True)
def token_reward_credit(traj: Trajectory, rollout_cfg: RolloutConfig,
                        inputs: CreditInputs | None = None) -> CreditOutput:
  """Weights = the token-reward mask (within the completion); ``token_advantages`` as above."""
  del rollout_cfg
  mask = inputs.token_reward_mask.astype(jnp.float32) * traj.completion_mask
  adv = token_group_advantages(inputs.token_rewards.astype(jnp.float32), mask, inputs.group_size)
  covered = jnp.sum(mask) / jnp.maximum(jnp.sum(traj.completion_mask), 1.0)
  return CreditOutput(weights=mask, token_advantages=adv, metrics={"token_reward_coverage": covered})
