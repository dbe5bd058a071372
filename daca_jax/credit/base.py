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
    records: ``credit_cfg -> (needs step_conf, needs step_entropy)``: what the rollout must record.
  """

  fn: CreditFn
  records: Callable[[CreditConfig], tuple[bool, bool]] = lambda cfg: (False, False)

  def __call__(self, traj: Trajectory, cfg: CreditConfig, rollout_cfg: RolloutConfig) -> jax.Array:
    return jax.lax.stop_gradient(self.fn(traj, cfg, rollout_cfg))


CREDIT: Registry[CreditAssigner] = Registry("credit assigner", "rl.credit")


def register_credit(name: str, records: Callable[[CreditConfig], tuple[bool, bool]] | None = None):
  """Decorator registering ``fn`` as credit assigner ``name``; ``records`` as in CreditAssigner."""

  def deco(fn: CreditFn) -> CreditFn:
    CREDIT.register(name)(CreditAssigner(fn, records or (lambda cfg: (False, False))))
    return fn

  return deco
