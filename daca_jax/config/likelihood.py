"""The likelihood section: ``LikelihoodConfig`` and one sub-section per estimator of
:mod:`daca_jax.likelihood` (``likelihood.stratified``, ...).
"""
from __future__ import annotations

import dataclasses

from daca_jax.config.checks import STRATA_PARTITIONS, _check_fields, _check_sections, _non_negative, _one_of, _positive
from daca_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class StratifiedConfig:
  """Stratified Masking Likelihood (``rl.likelihood="stratified"``, :mod:`daca_jax.likelihood.stratified`).

  Attributes:
    num_strata: K strata; 1 <= K <= gen_length.
    partition: how completion positions are split into strata: "random" (per sequence),
      "per_prompt" (one random partition shared by the completions of a prompt), "strided",
      "contiguous" or "commit_order".
  """

  num_strata: int = 4
  partition: str = "random"

  def validate(self, prefix: str = "likelihood.stratified") -> "StratifiedConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "num_strata")
    _one_of(prefix, self, "partition", STRATA_PARTITIONS)
    return self


@dataclasses.dataclass(frozen=True)
class CoupledConfig:
  """DiffuCoder's coupled estimator (``rl.likelihood="coupled"``, :mod:`daca_jax.likelihood.coupled`).

  Attributes:
    t_min: lower end of the masking rate t ~ U[t_min, t_max].
    t_max: upper end of that range (DiffuCoder: [0.2, 0.8]).
    full_pass: also run the fully-masked pass and average it in (DiffuCoder does).
  """

  t_min: float = 0.2
  t_max: float = 0.8
  full_pass: bool = True

  def validate(self, prefix: str = "likelihood.coupled") -> "CoupledConfig":
    _check_fields(prefix, self)
    if not 0.0 < self.t_min <= self.t_max < 1.0:
      raise ConfigError(f"{prefix}.t_min", self.t_min, f"0 < t_min <= t_max={self.t_max} < 1")
    return self


@dataclasses.dataclass(frozen=True)
class ELBOConfig:
  """GDPO's ELBO estimator (``rl.likelihood="elbo"``, :mod:`daca_jax.likelihood.elbo`).

  Attributes:
    nodes: Gauss–Legendre nodes in t (GDPO uses 2–3).
  """

  nodes: int = 2

  def validate(self, prefix: str = "likelihood.elbo") -> "ELBOConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "nodes")
    return self


@dataclasses.dataclass(frozen=True)
class TrajectoryConfig:
  """The sampler's own trajectory likelihood (``rl.likelihood="trajectory"``,
  :mod:`daca_jax.likelihood.trajectory`).

  Attributes:
    groups: passes: the S = ``likelihood.trajectory_steps`` steps are split into this many runs of
      consecutive steps and a token is
      scored in the state at the start of its commit step's run (0 means S: every token in its own
      commit state).
  """

  groups: int = 0

  def validate(self, prefix: str = "likelihood.trajectory") -> "TrajectoryConfig":
    _check_fields(prefix, self)
    _non_negative(prefix, self, "groups")
    return self


@dataclasses.dataclass(frozen=True)
class RLDFConfig:
  """RLDF's state sampling (``rl.likelihood="rldf"``, :mod:`daca_jax.likelihood.rldf`).

  Attributes:
    states: k, rollout states rebuilt per sequence (one pass each).
    sampling: how the k states are picked: "softmax" (probability ∝ softmax of each step's mean
      surprisal / temperature, without replacement), "uniform", or "topk" (the k most surprising
      steps).
    temperature: T of the "softmax" state sampling.
  """

  states: int = 4
  sampling: str = "softmax"
  temperature: float = 1.0

  def validate(self, prefix: str = "likelihood.rldf") -> "RLDFConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "states")
    if not self.temperature > 0:
      raise ConfigError(f"{prefix}.temperature", self.temperature, "a number > 0")
    _one_of(prefix, self, "sampling", ("softmax", "uniform", "topk"))
    return self


@dataclasses.dataclass(frozen=True)
class SPGBlockConfig:
  """SPG's block-wise masking (``rl.likelihood="spg_block"``, :mod:`daca_jax.likelihood.spg_block`;
  facebookresearch/SPG ``spg/spg_trainer.py`` ``SPGTrainer.forward_process``, ``forward_type="block_random"``).

  Attributes:
    num_t: masked contexts (forward passes) per sequence, each with its own block; at most the
      completion's ``gen_length / block_length`` blocks (SPG: 2).
    block_length: completion positions per block; divides ``rollout.gen_length``; 0 means
      ``rollout.block_length`` (the learner fills it in: SPG masks its generation blocks, 32 in its recipe).
      ``block_length = gen_length`` is SPG's ``forward_type="random"``.
    min_t: fewest positions of the chosen block masked, as a fraction of its valid positions (at least 1).
    max_t: most positions masked, as that fraction; ``min_t = max_t = 1`` is ``forward_type="block_all"``.
  """

  num_t: int = 2
  block_length: int = 0
  min_t: float = 0.0
  max_t: float = 1.0

  def validate(self, prefix: str = "likelihood.spg_block") -> "SPGBlockConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "num_t")
    _non_negative(prefix, self, "block_length")
    if not 0.0 <= self.min_t <= self.max_t <= 1.0:
      raise ConfigError(f"{prefix}.min_t", self.min_t, f"0 <= min_t <= max_t={self.max_t} <= 1")
    return self


ESPO_STRATIFY = ("row", "batch")
ESPO_PADDING = ("mask", "score")


@dataclasses.dataclass(frozen=True)
class ESPOELBOConfig:
  """ESPO's ELBO estimator (``rl.likelihood="espo_elbo"``, :mod:`daca_jax.likelihood.espo_elbo`;
  ML-GSAI/ESPO ``espo/espo_trainer.py`` ``forward_process`` and ``ESPOTrainer._get_elbo``).

  Attributes:
    num_mc: Monte-Carlo mask draws per sequence, averaged (ESPO ``num_mc``: 1 by default, 2 in its recipes).
    coupled: also score the complement of every mask (ESPO ``reduce_var``: True), so every completion
      position is scored once per draw; two passes per draw instead of one.
    stratify: how mask counts are stratified: "row" (the ``num_mc`` draws of a sequence share one
      random offset on a grid of ``L+1`` counts: row-local, so independent of ``rl.grad_accum`` and the
      device count) or "batch" (ESPO's: the rows of one estimator call share the offset, row r at
      ``offset + r (L+1)/B``; refused with ``rl.grad_accum > 1`` and ``parallel.strategy="pmap"``, whose
      rows draw from their own keys).
    padding: what ESPO's objective does with the positions after the first EOS: "score" (ESPO's
      ``compute_loss``: no completion mask, the sequence ELBO and so the ratio and the KL sum all L
      positions, the padding's terms included) or "mask" (the library's rule for every estimator: only
      positions inside the completion mask; the ratio still divides by L). Read by ``rl.objective="espo"``.
  """

  num_mc: int = 1
  coupled: bool = True
  stratify: str = "row"
  padding: str = "mask"

  def validate(self, prefix: str = "likelihood.espo_elbo") -> "ESPOELBOConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "num_mc")
    _one_of(prefix, self, "stratify", ESPO_STRATIFY)
    _one_of(prefix, self, "padding", ESPO_PADDING)
    return self


@dataclasses.dataclass(frozen=True)
class ELBOMCConfig:
  """BGPO's Monte-Carlo ELBO (``rl.likelihood="elbo_mc"``, :mod:`daca_jax.likelihood.elbo_mc`).

  Attributes:
    samples: n_t, Monte-Carlo samples (t_j, mask_j) of the ELBO, one forward pass each (BGPO: 16).
    stratified_t: draw t_j in the j-th of n_t equal bins of (0, 1] (stratified) rather than i.i.d.
  """

  samples: int = 16
  stratified_t: bool = True

  def validate(self, prefix: str = "likelihood.elbo_mc") -> "ELBOMCConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "samples")
    return self


@dataclasses.dataclass(frozen=True)
class StepMergeConfig:
  """d2's StepMerge trajectory likelihood with MAP's position term (``rl.likelihood="stepmerge"``,
  :mod:`daca_jax.likelihood.stepmerge`).

  Attributes:
    segments: N, runs of consecutive denoising steps (MAP's gsm8k recipe: 32).
    sample: K segments scored per update (0: all N); MAP's recipe: 12.
    position: also return the unmasking-position log-probs (the objective ``map`` reads them).
    position_method: "softmax" (Plackett-Luce choice among the competitors) or "bradley_terry".
    position_scope: competitors of a token: "segment" (positions unmasked in later segments) or
      "position" (also later steps of its own segment).
    position_confidence: "max_logit" or "top_prob" (the competitors' confidence).
    position_source: "gt" (the committed token's logit / probability) or "max" (as the competitors').
    position_temperature: tau of the position scores (> 0).
  """

  segments: int = 32
  sample: int = 0
  position: bool = True
  position_method: str = "softmax"
  position_scope: str = "segment"
  position_confidence: str = "max_logit"
  position_source: str = "gt"
  position_temperature: float = 1.0

  def validate(self, prefix: str = "likelihood.stepmerge") -> "StepMergeConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "segments")
    _non_negative(prefix, self, "sample")
    if self.sample > self.segments:
      raise ConfigError(f"{prefix}.sample", self.sample, f"0 (all) or at most {prefix}.segments={self.segments}")
    _one_of(prefix, self, "position_method", ("softmax", "bradley_terry"))
    _one_of(prefix, self, "position_scope", ("segment", "position"))
    _one_of(prefix, self, "position_confidence", ("max_logit", "top_prob"))
    _one_of(prefix, self, "position_source", ("gt", "max"))
    if not self.position_temperature > 0:
      raise ConfigError(f"{prefix}.position_temperature", self.position_temperature, "a number > 0")
    return self


@dataclasses.dataclass(frozen=True)
class LikelihoodConfig:
  """Options of the likelihood estimators: what they share, then one section per estimator. The
  estimator is chosen by ``rl.likelihood`` and receives only the fields it declares (SML:
  ``stratified``, ``p_mask_prompt``, ``strata_batch``; :func:`daca_jax.likelihood.base.estimator`).

  Attributes:
    p_mask_prompt: probability of masking each prompt token in the likelihood passes. 0 by default
      (the prompt is scored as given); d1 (Zhao et al. 2025) masks 15% of prompt tokens, so its
      reproductions set 0.15 explicitly.
    elbo_terms: how an objective reads the ELBO-type estimators (``elbo``, ``coupled``), whose token
      terms ``Σ_j (1/t_j) log p_j`` are not log-probs: "per_target" takes the ratio, the clip and the
      KL of each scored log-prob and multiplies its ELBO factor into the advantage (the same gradient
      at θ = θ_old); "summed" uses each token's summed term as its log-prob, as DiffuCoder's
      coupled-GRPO does (its ratio and k3 KL exponentiate ``1/t``-scaled log-ratios).
    strata_batch: passes kept at once by the multi-pass estimators (SML's strata, the trajectory
      estimator's step groups, RLDF's states): 0 vectorises all passes (``jax.vmap``); 0 < n < passes
      evaluates n at a time (``lax.map``, rematerialised): the update keeps the activations of n
      passes instead of all, at the price of one more forward pass each in the backward pass.
    trajectory_steps: denoising steps S of the rollouts the trajectory and rldf estimators rebuild;
      0 means ``rollout.steps`` (the learner sets it).
    stratified: :class:`StratifiedConfig` (``likelihood.stratified.*``, DACA's SML).
    coupled: :class:`CoupledConfig`.
    elbo: :class:`ELBOConfig`.
    trajectory: :class:`TrajectoryConfig`.
    rldf: :class:`RLDFConfig`.
    spg_block: :class:`SPGBlockConfig` (SPG's block-wise masks).
    espo_elbo: :class:`ESPOELBOConfig` (ESPO's stratified, coupled ELBO).
    elbo_mc: :class:`ELBOMCConfig` (BGPO).
    stepmerge: :class:`StepMergeConfig` (MAP).
  """

  p_mask_prompt: float = 0.0
  elbo_terms: str = "per_target"
  strata_batch: int = 0
  trajectory_steps: int = 0
  stratified: StratifiedConfig = StratifiedConfig()
  coupled: CoupledConfig = CoupledConfig()
  elbo: ELBOConfig = ELBOConfig()
  trajectory: TrajectoryConfig = TrajectoryConfig()
  rldf: RLDFConfig = RLDFConfig()
  spg_block: SPGBlockConfig = SPGBlockConfig()
  espo_elbo: ESPOELBOConfig = ESPOELBOConfig()
  elbo_mc: ELBOMCConfig = ELBOMCConfig()
  stepmerge: StepMergeConfig = StepMergeConfig()

  def validate(self, prefix: str = "likelihood") -> "LikelihoodConfig":
    _check_sections(prefix, self)
    if not 0.0 <= self.p_mask_prompt < 1.0:
      raise ConfigError(f"{prefix}.p_mask_prompt", self.p_mask_prompt, "a probability in [0, 1)")
    _one_of(prefix, self, "elbo_terms", ("per_target", "summed"))
    _non_negative(prefix, self, "strata_batch", "trajectory_steps")
    return self
