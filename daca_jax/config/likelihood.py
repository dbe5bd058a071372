"""The likelihood section: ``LikelihoodConfig``, composed of the fields every estimator shares
(:class:`~daca_jax.likelihood.base.EstimatorOptions`) and one sub-section per estimator of
:mod:`daca_jax.likelihood` (``likelihood.stratified``, ...), each defined in its estimator's module.
"""
from __future__ import annotations

import dataclasses

from daca_jax.config.checks import _check_sections, _one_of
from daca_jax.likelihood.base import EstimatorOptions
from daca_jax.likelihood.coupled import CoupledConfig
from daca_jax.likelihood.elbo import ELBOConfig
from daca_jax.likelihood.elbo_mc import ELBOMCConfig
from daca_jax.likelihood.espo_elbo import ESPOELBOConfig
from daca_jax.likelihood.rldf import RLDFConfig
from daca_jax.likelihood.spg_block import SPGBlockConfig
from daca_jax.likelihood.stepmerge import StepMergeConfig
from daca_jax.likelihood.stratified import StratifiedConfig
from daca_jax.likelihood.trajectory import TrajectoryConfig


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

  p_mask_prompt: float = EstimatorOptions.p_mask_prompt
  elbo_terms: str = "per_target"
  strata_batch: int = EstimatorOptions.strata_batch
  trajectory_steps: int = EstimatorOptions.trajectory_steps
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
    EstimatorOptions(self.p_mask_prompt, self.strata_batch, self.trajectory_steps).validate(prefix)
    _one_of(prefix, self, "elbo_terms", ("per_target", "summed"))
    return self
