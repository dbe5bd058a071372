"""Credit-assigner interface and registry (DESIGN §6).

A credit assigner maps a rollout's :class:`~daca_jax.diffusion.Trajectory` to token weights
``w [B, L] float32`` (stop-gradient, 0 outside ``completion_mask``) that multiply the advantage of
each completion token. Weights are computed once per rollout and reused for all inner iterations.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import jax

from daca_jax.diffusion.rollout import Trajectory
from daca_jax.registry import Registry
from daca_jax.types import CreditConfig, RolloutConfig

CreditFn = Callable[[Trajectory, CreditConfig, RolloutConfig], jax.Array]


@dataclasses.dataclass(frozen=True)
class CreditAssigner:
  """A registered credit assigner.

  Attributes:
    fn: ``(trajectory, credit_cfg, rollout_cfg) -> w [B, L] float32``.
    needs_step_conf: the rollout must record ``step_conf``.
    needs_step_entropy: the rollout must record ``step_entropy``.
  """

  fn: CreditFn
  needs_step_conf: bool = False
  needs_step_entropy: bool = False

  def __call__(self, traj: Trajectory, cfg: CreditConfig, rollout_cfg: RolloutConfig) -> jax.Array:
    return jax.lax.stop_gradient(self.fn(traj, cfg, rollout_cfg))


CREDIT: Registry[CreditAssigner] = Registry("credit assigner", "rl.credit")


def register_credit(name: str, *, needs_step_conf: bool = False, needs_step_entropy: bool = False):
  """Decorator registering ``fn`` as credit assigner ``name``."""

  def deco(fn: CreditFn) -> CreditFn:
    CREDIT.register(name)(CreditAssigner(fn, needs_step_conf, needs_step_entropy))
    return fn

  return deco
