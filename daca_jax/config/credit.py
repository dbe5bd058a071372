"""The credit section: ``CreditConfig`` and one sub-section per assigner of :mod:`daca_jax.credit`
(``credit.dps``, ``credit.dtca``, ...).
"""
from __future__ import annotations

import dataclasses

from daca_jax.config.checks import _check_fields, _check_sections, _non_negative, _one_of
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


@dataclasses.dataclass(frozen=True)
class DeltaConfig:
  """DelTA (``rl.credit="delta"``, :mod:`daca_jax.credit.delta`).

  Attributes:
    lambda_min: λmin, weight of the least side-specific token.
    lambda_max: λmax, weight of the most side-specific token.
    gamma: γ, temperature of the sigmoid over the discriminator margins, in units of each side's
      margin std (the reference implementation's value: 1).
  """

  lambda_min: float = 0.8
  lambda_max: float = 1.2
  gamma: float = 1.0

  def validate(self, prefix: str = "credit.delta") -> "DeltaConfig":
    _check_fields(prefix, self)
    if not 0.0 < self.lambda_min <= 1.0 <= self.lambda_max:
      raise ConfigError(f"{prefix}.lambda_min", self.lambda_min,
                        f"0 < lambda_min <= 1 <= lambda_max={self.lambda_max}")
    if not 0 < self.gamma < float("inf"):
      raise ConfigError(f"{prefix}.gamma", self.gamma, "a finite number > 0")
    return self


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


@dataclasses.dataclass(frozen=True)
class CreditConfig:
  """Options of the credit assigners, one section per assigner. The assigner is chosen by ``rl.credit``
  and receives only the sections it declares (DPS: ``dps``; DTCA, built on DPS's scores: ``dtca``
  and ``dps``; :class:`daca_jax.credit.CreditAssigner`).

  Attributes:
    dps: :class:`DPSConfig` (``credit.dps.*``).
    dtca: :class:`DTCAConfig` (``credit.dtca.*``).
    delta: :class:`DeltaConfig` (``credit.delta.*``).
    contrast: :class:`ContrastConfig` (``credit.contrast.*``).
    position_value: :class:`PositionValueConfig` (``credit.position_value.*``).
    drop_agreed: multiply every assigner's weights by the group-agreement mask: a token that all G
      rollouts of its group committed identically at that position gets weight 0 (its advantages sum
      to zero over the group; see :mod:`daca_jax.credit.agreement`).
  """

  dps: DPSConfig = DPSConfig()
  dtca: DTCAConfig = DTCAConfig()
  delta: DeltaConfig = DeltaConfig()
  contrast: ContrastConfig = ContrastConfig()
  position_value: PositionValueConfig = PositionValueConfig()
  drop_agreed: bool = False

  def validate(self, prefix: str = "credit") -> "CreditConfig":
    _check_sections(prefix, self)
    if not isinstance(self.drop_agreed, bool):
      raise ConfigError(f"{prefix}.drop_agreed", self.drop_agreed, "True or False")
    return self
