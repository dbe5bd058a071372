"""Signed contrast credit (``rl.credit="contrast"``): a token's share of its rollout's advantage can
change sign, by how one of the rollout's own records for that token compares with the others.

Multiplicative credit (DPS, DTCA, DelTA: ``A_b · w_{b,i}`` with ``w ≥ 0``) keeps the sign of the
rollout's advantage on every token, so it can never push down a wrong token of a good rollout. Here
each token gets::

    e_{b,i} = base_{b,i} + α · |A_b| · z_{b,i}

with ``base`` the rollout's advantage ``A_b`` (or :mod:`position_value`'s per-token advantage) and
``z`` a record the sampler already made, standardised over the row's tokens:

* ``signal``: ``commit_conf`` (the probability the sampler gave the token when it committed it) or
  ``dps`` (the DPS raw score, the step progress at the token's commit step,
  :func:`daca_jax.credit.dps.dps_raw_scores`);
* ``baseline``: ``u = s − mean over the row`` ("sequence"), or ``u = s − mean over the group's rollouts at
  the same position`` ("position": how the token compares with what the other rollouts had there);
  ``z = u / std_row(u)`` over the row's valid tokens (0 where that std is 0).

The contrast term scales with ``|A_b|``, not ``A_b``: a low-``z`` token is pushed down and a high-``z``
one up in every rollout, by as much as the rollout's advantage says the group's outcomes differ; with
``α > 1`` a token whose ``z < −1/α`` in a rollout with ``A_b > 0`` gets negative credit. With the
"sequence" baseline the term sums to zero over each row (the row's total credit stays ``L · A_b``). No
extra forward pass: the records are the rollout's. Not from a paper: a variant of this library's
credit study, screened against the task's per-token oracle (:mod:`daca_jax.studies.credit_alignment`).
"""
from __future__ import annotations

import dataclasses
import jax
import jax.numpy as jnp

from daca_jax.contracts import Trajectory
from daca_jax.credit.base import CreditInputs, CreditOutput, credit_assigner
from daca_jax.credit.dps import DPSConfig, dps_raw_scores, signal_records
from daca_jax.credit.position_value import position_value_advantages
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.checks import _check_fields, _non_negative, _one_of


@dataclasses.dataclass(frozen=True)
class ContrastConfig:
  """Signed contrast credit (``rl.credit="contrast"``, :mod:`daca_jax.credit.contrast`):
  ``e = base + alpha * |A| * z`` per token, ``z`` a rollout record standardised within the sequence.

  Attributes:
    alpha: gain of the contrast term; above 1 a token whose ``z`` is below ``-1 / alpha`` gets a share
      of the opposite sign to its rollout's advantage.
    signal: the per-token record contrasted: "commit_conf" (the probability of the committed token at
      its commit step) or "dps" (the DPS raw score: the step progress at the token's commit step,
      with ``credit.dps.scope`` / ``signal`` / ``self_term``).
    baseline: what ``z`` is measured from: "sequence" (the row's mean over its tokens) or "position"
      (the group's mean at the same completion position, over its G rollouts).
    base: the advantage the contrast is added to: "sequence" (the rollout's ``A``) or
      "position_value" (:func:`daca_jax.credit.position_value.position_value_advantages`).
  """

  alpha: float = 1.0
  signal: str = "commit_conf"
  baseline: str = "sequence"
  base: str = "sequence"

  def validate(self, prefix: str = "credit.contrast") -> "ContrastConfig":
    _check_fields(prefix, self)
    _non_negative(prefix, self, "alpha")
    _one_of(prefix, self, "signal", ("commit_conf", "dps"))
    _one_of(prefix, self, "baseline", ("sequence", "position"))
    _one_of(prefix, self, "base", ("sequence", "position_value"))
    return self


def contrast_scores(signal: jax.Array, completion_mask: jax.Array, group_size: int,
                    baseline: str = "sequence") -> jax.Array:
  """``z``: the per-token ``signal`` measured from its baseline and standardised per row.

  Args:
    signal: float32 [B, L] per-token record (e.g. commit confidence).
    completion_mask: [B, L], 1 on the tokens that count.
    group_size: G (static); the G rollouts of a prompt are G adjacent rows.
    baseline: "sequence" (the row's mean) or "position" (the group's mean at that position, over the
      rollouts that hold a token there).
  Returns:
    float32 [B, L], 0 where ``completion_mask`` is 0 and on rows whose centred signal is constant.
  Raises:
    ValueError: an unknown ``baseline``, or B not a multiple of G.
  """
  b, length = signal.shape
  m = completion_mask.astype(jnp.float32)
  s = signal.astype(jnp.float32)
  if baseline == "sequence":
    centre = jnp.sum(s * m, -1, keepdims=True) / jnp.maximum(jnp.sum(m, -1, keepdims=True), 1.0)
  elif baseline == "position":
    if group_size < 1 or b % group_size:
      raise ValueError(f"batch size {b} is not a multiple of rl.group_size={group_size} (>= 1)")
    sg, mg = s.reshape(-1, group_size, length), m.reshape(-1, group_size, length)
    centre = (jnp.sum(sg * mg, 1, keepdims=True) / jnp.maximum(jnp.sum(mg, 1, keepdims=True), 1.0))
    centre = jnp.broadcast_to(centre, sg.shape).reshape(b, length)
  else:
    raise ValueError(f"baseline={baseline!r}: 'sequence' or 'position'")
  u = (s - centre) * m
  # Scaled, not re-centred (unlike DPS's z-score): against the "position" baseline u keeps its sign,
  # so a token worse than the group's others there stays negative even if its whole row is.
  n = jnp.maximum(jnp.sum(m, -1, keepdims=True), 1.0)
  mean_u = jnp.sum(u, -1, keepdims=True) / n
  std = jnp.sqrt(jnp.sum(jnp.square(u - mean_u) * m, -1, keepdims=True) / n)
  return jnp.where(std > 1e-8, u / jnp.maximum(std, 1e-8), 0.0) * m


def _records(*, contrast: ContrastConfig = ContrastConfig(), dps: DPSConfig = DPSConfig()) -> frozenset[str]:
  return signal_records(dps=dps) if contrast.signal == "dps" else frozenset()


@credit_assigner("contrast", records=_records, needs_advantages=True, token_level=True)
def contrast_credit(traj: Trajectory, rollout_cfg: RolloutConfig, inputs: CreditInputs | None = None, *,
                    contrast: ContrastConfig = ContrastConfig(), dps: DPSConfig = DPSConfig()) -> CreditOutput:
  """Signed per-token advantages ``base + α |A| z`` (module docstring).

  Args:
    traj: the rollout (``commit_conf``; ``step_conf`` / ``step_entropy`` for ``signal="dps"``).
    rollout_cfg: the sampler's geometry.
    inputs: ``advantages`` float32 [B] and ``group_size`` G.
    contrast: this assigner's options (``credit.contrast``).
    dps: DPS's options, read for ``signal="dps"`` (``credit.dps``).
  Returns:
    :class:`CreditOutput`: ``weights`` = the completion mask, ``token_advantages`` float32 [B, L] (0 off
    the mask), metrics ``negative_share`` (fraction of valid tokens whose credit has the opposite sign
    to their rollout's advantage).
  Raises:
    ValueError: ``signal="dps"`` without the record it needs.
  """
  mask = traj.completion_mask.astype(jnp.float32)
  adv = inputs.advantages.astype(jnp.float32)
  g = inputs.group_size
  signal = traj.commit_conf if contrast.signal == "commit_conf" else dps_raw_scores(traj, dps, rollout_cfg)
  z = contrast_scores(signal, mask, g, contrast.baseline)
  if contrast.base == "position_value":
    base = position_value_advantages(traj.completion, mask, adv, g)
  else:
    base = adv[:, None] * mask
  token_adv = (base + contrast.alpha * jnp.abs(adv)[:, None] * z) * mask
  flipped = (token_adv * adv[:, None] < 0) * mask
  return CreditOutput(weights=mask, token_advantages=token_adv,
                      metrics={"negative_share": jnp.sum(flipped) / jnp.maximum(jnp.sum(mask), 1.0)})
