"""Position-value credit (``rl.credit="position_value"``): each token's advantage is the mean sequence
advantage of the group's rollouts that committed the *same token at the same position*.

For position ``i`` and token ``v``, the group estimates the value of writing ``v`` there by the mean
reward of its rollouts that did, ``Q̂(i, v) = mean_{g: y_{g,i} = v} r_g``; the token's advantage is that
value minus the group's mean reward,

    A_{b,i} = mean_{g ∈ group(b), y_{g,i} = y_{b,i}} A_g        (A_g = r_g − mean_group r)

It needs only the sequence rewards (no task-defined token rewards), and reduces to familiar cases at the
extremes: a token every rollout wrote there (a copied Sudoku given, shared padding) gets 0 — the group
carries no information about it, and its sequence advantages would only cancel; a token no other
rollout wrote there keeps its own sequence advantage, as in GRPO. In between, rollouts that agree on a
token share one advantage of one sign, instead of each carrying its own sequence's (which can be
negative for a right token in a sequence wrong elsewhere). Where the reward is a sum of per-position
outcomes (4x4 Sudoku's fraction of right cells) ``Q̂(i, v)`` is the group's estimate of that position's
outcome plus the mean of the others among those rollouts, so it moves toward the task's per-token credit
(``rl.credit="token_reward"``, the oracle) as G grows.

Position alignment is what makes ``Q̂`` meaningful: the tasks where the same position means the same
slot across rollouts (fixed-format answers such as a Sudoku grid). On free-form text, positions shift
between rollouts and the estimator falls back toward GRPO's sequence advantage (few tokens agree).
Only token-level objectives (diffu_grpo, rldf) accept per-token advantages.

With ``credit.position_value.weights="dps"`` each token's position value is multiplied by its DPS
weight (``credit.dps.*``; mean 1 over the sequence's tokens, in ``[w_min, w_max]`` before that
normalisation): the paper's "+DPS" applied on top of this assigner. The weights are positive, so they
rescale a token's credit but never change its sign.
"""
from __future__ import annotations

import dataclasses
import jax
import jax.numpy as jnp

from daca_jax.credit.agreement import group_agreement_mask
from daca_jax.credit.base import CreditInputs, CreditOutput, credit_assigner
from daca_jax.credit.dps import DPSConfig, dps_credit, signal_records
from daca_jax.contracts import Trajectory, check_shape
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.checks import _check_fields, _one_of


@dataclasses.dataclass(frozen=True)
class PositionValueConfig:
  """Position-value credit (``rl.credit="position_value"``, :mod:`daca_jax.credit.position_value`).

  Attributes:
    weights: what multiplies each token's position-value advantage: "none" (nothing) or "dps" (DACA's
      DPS weights, ``credit.dps.*``: the paper's "+DPS" on this assigner).
  """

  weights: str = "none"

  def validate(self, prefix: str = "credit.position_value") -> "PositionValueConfig":
    _check_fields(prefix, self)
    _one_of(prefix, self, "weights", ("none", "dps"))
    return self


def position_value_advantages(completion: jax.Array, completion_mask: jax.Array, advantages: jax.Array,
                              group_size: int) -> jax.Array:
  """Per-token advantages: the mean advantage of the group's rollouts holding the same token there.

  Args:
    completion: int32 [B, L] committed completion tokens; the G rollouts of a prompt are G adjacent rows.
    completion_mask: [B, L], 1 on the tokens the loss sees; rows are compared only where both hold a
      completion token.
    advantages: float32 [B] sequence advantages (group-relative).
    group_size: G (static).
  Returns:
    float32 [B, L], 0 where ``completion_mask`` is 0.
  Raises:
    ValueError: B is not a multiple of G, or G < 1.
    ShapeError: ``completion_mask`` not ``[B, L]`` or ``advantages`` not ``[B]``.
  """
  b, length = check_shape("completion", completion, ("B", "L"), "[B, L] completion tokens")
  check_shape("completion_mask", completion_mask, (b, length), "[B, L] like completion")
  check_shape("advantages", advantages, (b,), "[B]: one advantage per sequence")
  if group_size < 1 or b % group_size:
    raise ValueError(f"batch size {b} is not a multiple of rl.group_size={group_size} (>= 1)")
  n, g = b // group_size, group_size
  c = completion.reshape(n, g, length)
  m = completion_mask.astype(jnp.float32).reshape(n, g, length)
  a = advantages.astype(jnp.float32).reshape(n, 1, g, 1)
  same = (c[:, :, None, :] == c[:, None, :, :]).astype(jnp.float32) * m[:, None, :, :]  # [N, G, G, L]
  # The row itself is always among the rollouts that agree with it, so the count is >= 1 on the mask.
  value = jnp.sum(same * a, axis=2) / jnp.maximum(jnp.sum(same, axis=2), 1.0)
  return (value * m).reshape(b, length)


def _records(*, position_value: PositionValueConfig = PositionValueConfig(),
             dps: DPSConfig = DPSConfig()) -> frozenset[str]:
  return signal_records(dps=dps) if position_value.weights == "dps" else frozenset()


@credit_assigner("position_value", records=_records, needs_advantages=True, token_level=True)
def position_value_credit(traj: Trajectory, rollout_cfg: RolloutConfig, inputs: CreditInputs | None = None,
                          *, position_value: PositionValueConfig = PositionValueConfig(),
                          dps: DPSConfig = DPSConfig()) -> CreditOutput:
  """Per-token advantages of :func:`position_value_advantages`, times DPS weights when asked.

  Args:
    traj: the rollout (``step_conf`` / ``step_entropy`` too for ``position_value.weights="dps"``).
    rollout_cfg: the sampler's geometry.
    inputs: ``advantages`` float32 [B] and ``group_size`` G.
    position_value: this assigner's options (``credit.position_value``).
    dps: DPS's options, read for ``weights="dps"`` (``credit.dps``).
  Returns:
    :class:`CreditOutput`: ``weights`` = the completion mask (``weights="none"``) or the DPS weights
    float32 [B, L]; ``token_advantages`` float32 [B, L] = position value × those weights (0 off the
    mask); metric ``agreed_fraction`` (share of valid tokens all G rollouts hold at that position).
  Raises:
    ValueError: ``weights="dps"`` without the record DPS reads.
  """
  mask = traj.completion_mask.astype(jnp.float32)
  adv = position_value_advantages(traj.completion, mask, inputs.advantages, inputs.group_size)
  weights = mask
  if position_value.weights == "dps":
    weights = dps_credit(traj, rollout_cfg, dps=dps)
  keep = group_agreement_mask(traj.completion, mask, inputs.group_size)
  shared = 1.0 - jnp.sum(keep) / jnp.maximum(jnp.sum(mask), 1.0)
  return CreditOutput(weights=weights, token_advantages=adv * weights, metrics={"agreed_fraction": shared})
