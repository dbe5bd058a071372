"""Denoising Progress Scores (DPS), the temporal credit of DACA-GRPO (arXiv 2605.16342).

Read off the rollout's own per-step predictions, no extra forward pass. For step s, with
``conf^(s)_j`` the top-1 probability at completion position j when the model saw x_s and
``M_{s+1}`` the positions still masked after step s, the step progress is

    Δ_s = mean_{j ∈ M_{s+1}} (conf^(s+1)_j − conf^(s)_j)        (0 when M_{s+1} is empty)

— how much committing the tokens of step s raised the certainty about what is still unknown. Token i
committed at step c_i gets the raw score ``d_i = Δ_{c_i}`` (``credit.dps.signal="neg_entropy"`` uses minus
the predictive entropy in place of the confidence) (plus ``λ`` times its own confidence rise
from its block's first step to c_i when ``self_term`` λ > 0). Scores are z-scored per sequence over
valid tokens, mapped to ``w = clip(1 + α z, w_min, w_max)`` and renormalised to mean 1 over valid tokens.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from daca_jax.credit.base import CreditInputs, credit_assigner
from daca_jax.contracts import Trajectory, check_shape, check_trajectory
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.checks import _check_fields, _non_negative, _one_of
from daca_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class DPSConfig:
  """Denoising Progress Scores (``rl.credit="dps"``, :mod:`daca_jax.credit.dps`); DTCA builds on them
  and reads the same fields.

  Attributes:
    alpha: z-score gain: ``w = clip(1 + alpha * z, w_min, w_max)``.
    w_min: lower clip of the weights.
    w_max: upper clip of the weights.
    scope: which still-masked positions measure step progress: "all" remaining or the current
      "block" only.
    signal: the certainty measure of step progress: "confidence" (top-1 probability) or
      "neg_entropy" (minus the predictive entropy).
    self_term: λ, weight of the token's own confidence rise from its block's first step to its
      commit step, added to the raw score.
  """

  alpha: float = 0.5
  w_min: float = 0.5
  w_max: float = 2.0
  scope: str = "all"
  signal: str = "confidence"
  self_term: float = 0.0

  def validate(self, prefix: str = "credit.dps") -> "DPSConfig":
    _check_fields(prefix, self)
    _non_negative(prefix, self, "alpha", "w_min", "self_term")
    if not self.w_max >= self.w_min:
      raise ConfigError(f"{prefix}.w_max", self.w_max, f">= {prefix}.w_min={self.w_min}")
    if not self.w_min <= 1.0 <= self.w_max:
      raise ConfigError(f"{prefix}.w_min", self.w_min, "w_min <= 1 <= w_max so that mean 1 is reachable")
    _one_of(prefix, self, "scope", ("all", "block"))
    _one_of(prefix, self, "signal", ("confidence", "neg_entropy"))
    return self


def step_progress(step_conf: jax.Array, commit_step: jax.Array, rollout_cfg: RolloutConfig,
                  scope: str = "all") -> jax.Array:
  """Δ_s for every step.

  Args:
    step_conf: float32 [S, B, L] top-1 confidence at still-masked positions per step.
    commit_step: int32 [B, L] commit step of each completion position.
    rollout_cfg: sampler geometry (for ``scope="block"``).
    scope: "all" remaining masked positions, or only those of step s's "block".
  Returns:
    float32 [S, B]; Δ_{S-1} = 0 (nothing is left after the last step).
  Raises:
    ShapeError: ``step_conf`` not ``[rollout_cfg.steps, B, rollout_cfg.gen_length]`` or
      ``commit_step`` not ``[B, L]``.
  """
  steps, b, length = check_shape("step_conf", step_conf, (rollout_cfg.steps, "B", rollout_cfg.gen_length),
                                 "[S, B, L] with S = rollout_cfg.steps, L = rollout_cfg.gen_length")
  check_shape("commit_step", commit_step, (b, length), "[B, L] like step_conf's rows")
  s_idx = jnp.arange(steps, dtype=jnp.int32)
  nxt = jnp.concatenate([step_conf[1:], jnp.zeros_like(step_conf[:1])], axis=0)
  remaining = commit_step[None, :, :] > s_idx[:, None, None]  # [S, B, L]: masked in x_{s+1}
  remaining &= (s_idx < steps - 1)[:, None, None]
  if scope == "block":
    blk_of_pos = jnp.arange(length) // rollout_cfg.block_length  # [L]
    blk_of_step = s_idx // rollout_cfg.steps_per_block  # [S]
    remaining &= (blk_of_pos[None, :] == blk_of_step[:, None])[:, None, :]
  m = remaining.astype(jnp.float32)
  total = jnp.sum((nxt - step_conf) * m, axis=-1)
  count = jnp.sum(m, axis=-1)
  return jnp.where(count > 0, total / jnp.maximum(count, 1.0), 0.0)


def zscore_weights(raw: jax.Array, valid: jax.Array, alpha: float, w_min: float,
                   w_max: float) -> jax.Array:
  """Per-sequence z-score → ``clip(1 + α z, w_min, w_max)`` → mean 1 over valid tokens.

  Args:
    raw: float32 [B, L] raw scores.
    valid: float32 [B, L] 1 for tokens that count.
  Returns:
    float32 [B, L], 0 where ``valid`` is 0. A sequence whose scores are all equal gets weight 1.
  Raises:
    ShapeError: ``raw`` not ``[B, L]`` or ``valid`` not of its shape.
  """
  b, length = check_shape("raw", raw, ("B", "L"), "[B, L] raw scores")
  check_shape("valid", valid, (b, length), "[B, L] like raw")
  n = jnp.maximum(jnp.sum(valid, -1, keepdims=True), 1.0)
  mean = jnp.sum(raw * valid, -1, keepdims=True) / n
  var = jnp.sum(jnp.square(raw - mean) * valid, -1, keepdims=True) / n
  std = jnp.sqrt(var)
  z = jnp.where(std > 1e-8, (raw - mean) / jnp.maximum(std, 1e-8), 0.0)
  w = jnp.clip(1.0 + alpha * z, w_min, w_max) * valid
  w_mean = jnp.sum(w, -1, keepdims=True) / n
  return jnp.where(w_mean > 0, w / jnp.maximum(w_mean, 1e-8), valid)


def certainty_signal(traj: Trajectory, dps: DPSConfig) -> jax.Array:
  """[S, B, L] certainty per step: top-1 confidence, or minus the entropy (0 where committed)."""
  if dps.signal == "neg_entropy":
    if traj.step_entropy is None:
      raise ValueError("DPS with credit.dps.signal='neg_entropy' needs trajectory.step_entropy: "
                       "run the rollout with record_step_entropy=True")
    return -traj.step_entropy
  if traj.step_conf is None:
    raise ValueError("DPS needs trajectory.step_conf: run the rollout with record_step_conf=True")
  return traj.step_conf


def dps_raw_scores(traj: Trajectory, dps: DPSConfig, rollout_cfg: RolloutConfig) -> jax.Array:
  """Raw DPS score ``d_i`` of every completion token: float32 [B, L].

  Raises:
    ShapeError: the trajectory disagrees with ``rollout_cfg`` (:func:`daca_jax.contracts.check_trajectory`).
  """
  check_trajectory(traj, rollout_cfg)
  conf = certainty_signal(traj, dps)
  delta = step_progress(conf, traj.commit_step, rollout_cfg, dps.scope)  # [S, B]
  c = jnp.clip(traj.commit_step, 0, conf.shape[0] - 1)  # [B, L]
  d = jnp.take_along_axis(delta.T, c, axis=1)
  if dps.self_term:
    length = c.shape[1]
    first_step = (jnp.arange(length) // rollout_cfg.block_length) * rollout_cfg.steps_per_block
    conf_bl = jnp.transpose(conf, (1, 2, 0))  # [B, L, S]
    at_commit = jnp.take_along_axis(conf_bl, c[..., None], -1)[..., 0]
    at_start = jnp.take_along_axis(conf_bl, jnp.broadcast_to(first_step, c.shape)[..., None], -1)[..., 0]
    d = d + dps.self_term * (at_commit - at_start)
  return d


def signal_records(*, dps: DPSConfig = DPSConfig()) -> frozenset[str]:
  """The trajectory record that ``credit.dps.signal`` reads."""
  return frozenset({"step_conf" if dps.signal == "confidence" else "step_entropy"})


@credit_assigner("dps", records=signal_records)
def dps_credit(traj: Trajectory, rollout_cfg: RolloutConfig, inputs: CreditInputs | None = None, *,
               dps: DPSConfig = DPSConfig()) -> jax.Array:
  """DPS token weights: float32 [B, L], mean 1 over valid tokens of each sequence, 0 elsewhere.

  Args:
    traj: the rollout, with ``step_conf`` (``step_entropy`` for ``dps.signal="neg_entropy"``).
    rollout_cfg: the sampler's geometry (``gen_length``, ``steps``, ``block_length``).
    inputs: unused (DPS reads the trajectory alone).
    dps: DPS's options (``credit.dps``).
  Raises:
    ShapeError: the trajectory disagrees with ``rollout_cfg``.
    ValueError: the trajectory lacks the record ``dps.signal`` needs.
  """
  del inputs
  raw = dps_raw_scores(traj, dps, rollout_cfg)
  return zscore_weights(raw, traj.completion_mask, dps.alpha, dps.w_min, dps.w_max)
