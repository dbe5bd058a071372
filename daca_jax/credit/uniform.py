"""Uniform credit: every valid completion token gets weight 1 (the base GRPO-style methods)."""
from __future__ import annotations

import jax

from daca_jax.credit.base import CreditInputs, credit_assigner
from daca_jax.contracts import Trajectory
from daca_jax.config.rollout import RolloutConfig


@credit_assigner("uniform")
def uniform_credit(traj: Trajectory, rollout_cfg: RolloutConfig,
                   inputs: CreditInputs | None = None) -> jax.Array:
  """Returns ``completion_mask`` (float32 [B, L])."""
  del rollout_cfg, inputs
  return traj.completion_mask
