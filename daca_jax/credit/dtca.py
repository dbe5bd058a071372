"""DTCA: Denoising Token Credit Assignment, sharing DPS's step-progress machinery.

From the rollout's own records (no extra forward pass):

1. **Contribution** of token i: the confidence gain of the positions still masked after its commit
   step, ``d_i = Δ_{c_i}`` (exactly DPS's raw score, :func:`~daca_jax.credit.dps.dps_raw_scores`,
   including its ``scope`` / ``signal`` / ``self_term`` options).
2. **Category averaging**: a :class:`~daca_jax.credit.taggers.TokenTagger` gives every token a
   category (NUM / OP / PUNCT / WORD / SPECIAL by default); each token's credit is the mean
   contribution of its category within its sequence, ``r_i = mean{d_j : cat_j = cat_i}``.
3. **State selection** (a): the denoising states (steps) of each rollout are ranked by their gain
   ``Δ_s``; only tokens committed at the top ``ceil(credit.dtca.top_frac · S)`` steps are trained on (the
   others get weight 0). With ``rl.likelihood="trajectory"`` this is literally training on the
   selected states; with other estimators it keeps the selected states' tokens.
4. **Credit** (b): as DPS, ``w = clip(1 + α z, w_min, w_max)`` with z the per-sequence z-score of
   ``r`` over the kept tokens, renormalised to mean 1 over them.
5. **Entropy calibration** (c): each category's mean predictive entropy at the commit step is
   tracked; the first ``credit.dtca.entropy_window`` updates form a baseline, after which every category's
   credit is multiplied by ``clip(H_now / H_baseline, calib_min, calib_max)`` — categories
   whose entropy collapses get less credit — and the batch is rescaled to mean 1 over kept tokens.

When every token of a sequence has one category (4x4 Sudoku: all NUM), step 2 makes the credit
uniform within the sequence, and DTCA acts through state selection and calibration only.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

from daca_jax.credit.base import CreditInputs, CreditOutput, credit_assigner
from daca_jax.credit.dps import DPSConfig, certainty_signal, dps_raw_scores, signal_records, step_progress, zscore_weights
from daca_jax.contracts import Trajectory
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.checks import _check_fields, _non_negative
from daca_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class DTCAConfig:
  """DTCA (``rl.credit="dtca"``, :mod:`daca_jax.credit.dtca`). Its step progress and weights are
  DPS's (``credit.dps.scope``, ``signal``, ``self_term``, ``alpha``, ``w_min``, ``w_max``).

  Attributes:
    tagger: the token tagger (registry ``TAGGERS``): "rule" = NUM / OP / PUNCT / WORD / SPECIAL.
    top_frac: μ: fraction of each rollout's denoising states (steps) kept for training, ranked by
      their confidence gain; tokens committed at the other steps get weight 0.
    entropy_window: entropy calibration: the first N updates form the baseline of each category's
      mean predictive entropy (0 disables calibration).
    calib_min: lower clip of the calibration factor (entropy now / baseline entropy).
    calib_max: upper clip of that factor.
  """

  tagger: str = "rule"
  top_frac: float = 0.4
  entropy_window: int = 10
  calib_min: float = 0.5
  calib_max: float = 2.0

  def validate(self, prefix: str = "credit.dtca") -> "DTCAConfig":
    _check_fields(prefix, self)
    if not 0.0 < self.top_frac <= 1.0:
      raise ConfigError(f"{prefix}.top_frac", self.top_frac, "a fraction in (0, 1]")
    _non_negative(prefix, self, "entropy_window")
    if not 0.0 < self.calib_min <= 1.0 <= self.calib_max:
      raise ConfigError(f"{prefix}.calib_min", self.calib_min,
                        f"0 < calib_min <= 1 <= calib_max={self.calib_max}")
    return self


def dtca_records(*, dtca: DTCAConfig = DTCAConfig(), dps: DPSConfig = DPSConfig()) -> frozenset[str]:
  """The trajectory records DTCA reads: DPS's certainty signal, and the entropies when calibrating."""
  calib = {"step_entropy"} if dtca.entropy_window > 0 else set()
  return signal_records(dps=dps) | calib


def dtca_init_state(num_categories: int) -> dict[str, jax.Array]:
  """Entropy-baseline accumulators: per-category sums and counts [C] and the update counter."""
  return {"entropy_sum": jnp.zeros((num_categories,), jnp.float32),
          "entropy_count": jnp.zeros((num_categories,), jnp.float32),
          "updates": jnp.zeros((), jnp.int32)}


def category_mean(values: jax.Array, categories: jax.Array, valid: jax.Array,
                  num_categories: int) -> jax.Array:
  """Per-sequence mean of ``values`` over tokens of each token's category: float32 [B, L].

  Args:
    values: float32 [B, L]; categories: int32 [B, L]; valid: float32 [B, L] tokens that count.
  """
  onehot = jax.nn.one_hot(categories, num_categories, dtype=jnp.float32) * valid[..., None]  # [B, L, C]
  sums = jnp.einsum("bl,blc->bc", values, onehot)
  counts = jnp.sum(onehot, axis=1)
  means = sums / jnp.maximum(counts, 1.0)  # [B, C]
  return jnp.take_along_axis(means, categories, axis=1)


def top_state_mask(delta: jax.Array, commit_step: jax.Array, top_frac: float) -> jax.Array:
  """1 for tokens committed at one of their rollout's top ``ceil(top_frac · S)`` steps by gain.

  Args:
    delta: float32 [S, B] step gains Δ_s; ties go to the earlier step.
    commit_step: int32 [B, L].
  Returns:
    bool [B, L].
  """
  steps = delta.shape[0]
  n_keep = max(1, math.ceil(top_frac * steps - 1e-9))
  order = jnp.argsort(-delta.T, axis=-1, stable=True)  # [B, S]
  rank = jnp.argsort(order, axis=-1, stable=True)
  keep_step = rank < n_keep
  return jnp.take_along_axis(keep_step, jnp.clip(commit_step, 0, steps - 1), axis=1)


def _entropy_at_commit(traj: Trajectory) -> jax.Array:
  ent = jnp.transpose(traj.step_entropy, (1, 2, 0))  # [B, L, S]
  c = jnp.clip(traj.commit_step, 0, ent.shape[-1] - 1)
  return jnp.take_along_axis(ent, c[..., None], axis=-1)[..., 0]


def calibration_factors(state: dict[str, jax.Array], h_now: jax.Array, present: jax.Array,
                        dtca: DTCAConfig) -> jax.Array:
  """Per-category factor ``clip(H_now / H_base, min, max)``; 1 during the baseline window, for
  categories absent now, and for categories with no baseline. float32 [C]."""
  base = state["entropy_sum"] / jnp.maximum(state["entropy_count"], 1.0)
  ready = (state["updates"] >= dtca.entropy_window) & (state["entropy_count"] > 0) & present
  ratio = h_now / jnp.maximum(base, 1e-8)
  return jnp.where(ready, jnp.clip(ratio, dtca.calib_min, dtca.calib_max), 1.0)


@credit_assigner("dtca", records=dtca_records, needs_categories=True, init_state=dtca_init_state)
def dtca_credit(traj: Trajectory, rollout_cfg: RolloutConfig, inputs: CreditInputs, *,
                dtca: DTCAConfig = DTCAConfig(), dps: DPSConfig = DPSConfig()) -> CreditOutput:
  """DTCA token weights.

  Args:
    traj: rollout with ``step_conf`` (or ``step_entropy`` for ``signal="neg_entropy"``) and, when
      calibration is on, ``step_entropy``.
    inputs: ``categories`` int32 [B, L] and ``state`` from :func:`dtca_init_state`.
    dtca: DTCA's options (``credit.dtca``).
    dps: DPS's options (``credit.dps``): DTCA scores tokens with DPS's raw scores and weight map.
  Returns:
    CreditOutput: weights float32 [B, L] (0 on invalid and unselected tokens; mean 1 over the
    kept tokens of the batch), the next state, and metrics ``dtca_kept_frac``,
    ``dtca_calib_min``, ``dtca_calib_max``.
  """
  valid = traj.completion_mask
  cats = inputs.categories.astype(jnp.int32)
  state: dict[str, Any] = inputs.state
  num_cat = state["entropy_sum"].shape[0]
  d = dps_raw_scores(traj, dps, rollout_cfg)  # [B, L]
  r = category_mean(d, cats, valid, num_cat)
  delta = step_progress(certainty_signal(traj, dps), traj.commit_step, rollout_cfg, dps.scope)  # [S, B]
  keep = (top_state_mask(delta, traj.commit_step, dtca.top_frac) & (valid > 0)).astype(jnp.float32)
  w = zscore_weights(r, keep, dps.alpha, dps.w_min, dps.w_max)
  metrics = {"dtca_kept_frac": jnp.sum(keep) / jnp.maximum(jnp.sum(valid), 1.0)}
  if dtca.entropy_window > 0:
    onehot = jax.nn.one_hot(cats, num_cat, dtype=jnp.float32) * keep[..., None]  # [B, L, C]
    counts = jnp.sum(onehot, axis=(0, 1))
    h_now = jnp.einsum("bl,blc->c", _entropy_at_commit(traj), onehot) / jnp.maximum(counts, 1.0)
    present = counts > 0
    factor = calibration_factors(state, h_now, present, dtca)
    w = w * factor[cats]
    total = jnp.sum(w)
    w = jnp.where(total > 0, w * jnp.sum(keep) / jnp.maximum(total, 1e-8), w)
    in_window = (state["updates"] < dtca.entropy_window) & present
    state = {"entropy_sum": state["entropy_sum"] + jnp.where(in_window, h_now, 0.0),
             "entropy_count": state["entropy_count"] + in_window.astype(jnp.float32),
             "updates": state["updates"] + 1}
    any_present = jnp.any(present)
    metrics.update(
        dtca_calib_min=jnp.where(any_present, jnp.min(jnp.where(present, factor, jnp.inf)), 1.0),
        dtca_calib_max=jnp.where(any_present, jnp.max(jnp.where(present, factor, -jnp.inf)), 1.0))
  else:
    state = dict(state, updates=state["updates"] + 1)
  return CreditOutput(weights=w, state=state, metrics=metrics)
