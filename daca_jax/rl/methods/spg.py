"""SPG, Sandwiched Policy Gradient (Wang et al. 2025, "SPG: Sandwiched Policy Gradient for Masked
Diffusion Language Models"; facebookresearch/SPG).

Sources: ``spg/spg_trainer.py``: ``SPGTrainer.compute_loss`` (the loss), ``SPGTrainer._get_per_seq_logps``
(the two bounds), ``SPGTrainer._generate_and_score_completions`` (advantages ``r − group mean`` and the
sign that picks the bound: ``reward_mask = advantages > 0``).

A sequence's log-likelihood is replaced by a lower bound where its advantage is positive (maximising
it raises a lower bound) and by an upper bound where it is negative (minimising it lowers an upper
bound), so that both directions push the true likelihood the intended way. With the estimator's S
contexts (``rl.likelihood="spg_block"``: SPG's block-masked passes), context j of row b masking the
valid positions ``M_bj`` (``n_bj = |M_bj|`` of the row's ``len_b`` valid positions, ``t_bj = n_bj/len_b``):

* lower bound, per token of the completion: ``ELBO_b = (1/S) Σ_j Σ_{i∈M_bj} w_i log p_bji / n_bj``;
* upper bound (a Rényi / power-mean bound of order β): per position i masked in some context,
  ``u_bi = (1/β) log( (1/S) Σ_j 1[i∈M_bj] p_bji^β / t_bj )``, and ``EUBO_b = Σ_i w_i u_bi / |{i: u_bi defined}|``;
* ``bound_b = ELBO_b`` if ``A_b > 0`` else ``ω·EUBO_b + (1−ω)·ELBO_b`` (``rl.spg.mix_weight`` ω,
  ``rl.spg.eubo_beta`` β);
* ``loss = −Σ_b A_b · bound_b · len_b / Σ_b len_b`` (SPG weights each sequence's per-token bound by its
  length over the batch's valid tokens).

No ratio to θ_old, no clip, and no KL: SPG's reference raises for ``beta != 0``; the configuration
refuses ``rl.beta > 0`` (:func:`check_spg_config`). Its μ > 1 inner updates re-differentiate the same
bound on the same rollouts (SPG's recipe: μ = 4), with no θ_old pass (registered ``reads_old=False``).

Credit: the per-token terms of both bounds are multiplied by the credit weights ``w_i`` (1 under
``rl.credit="uniform"``: SPG exactly). Per-token advantages (``rl.credit="token_reward"``) are refused:
the bound is chosen by the sign of the sequence advantage.

Other estimators: any estimator of kind ``"logprob"`` works; one whose every valid token is a target
in a single context (``mean_field``, ``stratified`` = SML, ``trajectory``) has ``t = 1`` and both
bounds equal the mean token log-prob, so SPG becomes a length-weighted REINFORCE on that likelihood
(no sandwich). Estimators whose targets carry ELBO factors (``elbo``, ``coupled``, ``espo_elbo``) or that
score rebuilt rollout states (``rldf``) are refused: SPG computes its own ``1/t`` from the masks.

Normalisation: SPG divides by the valid tokens of each device's micro-batch (6 rows; Sudoku 3) and the trainer
averages the micro-batches' losses; here the divisor is the whole batch's valid tokens, so that the
loss is row-local and ``rl.grad_accum`` exact (:mod:`daca_jax.rl.accumulate`). The two agree up to a
constant when micro-batches hold equally many valid tokens, and weight rows slightly differently otherwise.

Things SPG's code does that are not reproduced: ``logp_estimation="zero"`` (the negative sequences'
term dropped) is ω-less and not offered; SPG's bound uses the softmax over the whole vocabulary, the
library's estimators the sampler's proposable ids (:mod:`daca_jax.likelihood.common`); SPG raises
probabilities to β in float32 and leaves a position out of the upper bound where all its p^β underflow
to 0 (``loss_mask = per_token_avg_ps > 0``), the log-sum-exp here keeps it (equal wherever SPG's is finite).
"""
from __future__ import annotations

import dataclasses
import jax
import jax.numpy as jnp

from daca_jax.contracts import PolicyBatch
from daca_jax.errors import ConfigError
from daca_jax.rl.methods.base import Aux, JobConfig, Method, objective, sequence_advantages_only
from daca_jax.config.checks import _check_fields



@dataclasses.dataclass(frozen=True)
class SPGConfig:
  """SPG's sandwiched bound (``rl.objective="spg"``, :mod:`daca_jax.rl.methods.spg`; facebookresearch/SPG
  ``spg/spg_trainer.py`` ``SPGTrainer._get_per_seq_logps``).

  Attributes:
    eubo_beta: β > 0 of the upper bound's power mean ``(1/β) log E[p^β / t]`` (SPG ``eubo_beta``:
      1.5 for GSM8K and MATH, 2.0 for Countdown, 1.0 for Sudoku).
    mix_weight: ω in [0, 1], the upper bound's share of a negative-advantage sequence's bound,
      ``ω·EUBO + (1−ω)·ELBO`` (SPG ``mix_weight`` 0.5 with ``logp_estimation="mix"``; 1 is its
      ``"eubo"``, 0 its ``"elbo"``). Positive-advantage sequences always use the ELBO.
  """

  eubo_beta: float = 1.5
  mix_weight: float = 0.5

  def validate(self, prefix: str = "rl.spg") -> "SPGConfig":
    _check_fields(prefix, self)
    if not self.eubo_beta > 0:
      raise ConfigError(f"{prefix}.eubo_beta", self.eubo_beta, "a number > 0")
    if not 0.0 <= self.mix_weight <= 1.0:
      raise ConfigError(f"{prefix}.mix_weight", self.mix_weight, "a number in [0, 1]")
    return self

# Estimators SPG refuses, and why (check_spg_config).
SPG_REFUSED_LIKELIHOODS = {
    "elbo": "its targets carry quadrature ELBO factors; SPG computes its own 1/t from each context's mask",
    "coupled": "its targets carry ELBO factors 1/t, 1/(1-t); SPG computes its own 1/t from each context's mask",
    "espo_elbo": "its targets carry ELBO factors; SPG computes its own 1/t from each context's mask",
    "rldf": "its targets are rebuilt rollout states, not masked contexts of one mask rate each",
}


def spg_bounds(logp: jax.Array, mask: jax.Array, weights: jax.Array, completion_mask: jax.Array,
               eubo_beta: float) -> tuple[jax.Array, jax.Array]:
  """SPG's per-sequence lower and upper bounds (per token of the completion; module docstring).

  Args:
    logp: float32 [B, S·L] log-probs of the targets, context-major.
    mask: float32 [B, S·L] 1 on the targets (masked valid positions of each context).
    weights: float32 [B, S·L] credit weights (tiled over the contexts).
    completion_mask: float32 [B, L].
    eubo_beta: β of the upper bound.
  Returns:
    (elbo float32 [B], eubo float32 [B]).
  """
  b, length = completion_mask.shape
  s = logp.shape[-1] // length
  lp, m, w = (x.reshape(b, s, length) for x in (logp, mask, weights))
  valid = jnp.sum(completion_mask, -1)  # len_b
  n = jnp.sum(m, -1)  # [B, S] targets per context
  elbo = jnp.mean(jnp.sum(w * m * lp, -1) / jnp.maximum(n, 1.0), -1)
  t = n / jnp.maximum(valid, 1.0)[:, None]  # empirical mask rate of each context
  # log((1/S) Σ_j 1[masked] p^β / t_j), with the unmasked contexts out of the sum (and of the gradient).
  terms = jnp.where(m > 0, eubo_beta * lp - jnp.log(jnp.maximum(t, 1e-8))[..., None], -1e30)
  hit = jnp.max(m, axis=1)  # [B, L] positions masked in some context
  u = jnp.where(hit > 0, jax.nn.logsumexp(terms, axis=1) - jnp.log(float(s)), 0.0) / eubo_beta
  eubo = jnp.sum(w[:, 0] * hit * u, -1) / jnp.maximum(jnp.sum(hit, -1), 1.0)
  return elbo, eubo


@objective("spg")
def spg_loss(logp: jax.Array, batch: PolicyBatch, *, spg: SPGConfig = SPGConfig()) -> tuple[jax.Array, Aux]:
  """SPG's sandwiched policy-gradient loss (module docstring).

  Args:
    logp: float32 [B, S·L] the current policy's log-probs of the estimator's targets (differentiable).
    batch: ``mask``, ``weights`` [B, S·L]; ``advantages`` [B]; ``completion_mask`` [B, L] (the
      per-context mask rates and the sequence lengths; the learner sets it; None means S = 1 and the
      completion mask is ``batch.mask``).
    spg: ``eubo_beta`` β and ``mix_weight`` ω (``rl.spg``).
  Returns:
    (scalar loss, aux with "pg_loss", "elbo", "eubo" (batch means of the bounds), "neg_frac" (rows
    on the mixed bound), "kl" (0), "clip_frac" (0), "ratio_mean" (1)).
  Raises:
    ValueError: ``batch.token_advantages`` set.
  """
  sequence_advantages_only(batch, "spg")
  # Without the completion mask (a direct call on [B, L] log-probs): one context whose targets are the
  # completion, t = 1.
  cm = batch.mask if batch.completion_mask is None else batch.completion_mask
  elbo, eubo = spg_bounds(logp, batch.mask, batch.weights, cm, spg.eubo_beta)
  adv = batch.advantages
  positive = adv > 0
  bound = jnp.where(positive, elbo, spg.mix_weight * eubo + (1.0 - spg.mix_weight) * elbo)
  lengths = jnp.sum(cm, -1)
  loss = -jnp.sum(adv * bound * lengths) / jnp.maximum(jnp.sum(lengths), 1.0)
  aux = {"pg_loss": loss, "elbo": jnp.mean(elbo), "eubo": jnp.mean(eubo),
         "neg_frac": jnp.mean((~positive).astype(jnp.float32)), "kl": jnp.zeros(()),
         "clip_frac": jnp.zeros(()), "ratio_mean": jnp.ones(())}
  return loss, aux


def check_spg_config(cfg: JobConfig) -> None:
  """Refuses the SPG combinations that are not meaningful (one-line ConfigError with the reason).

  Args:
    cfg: the configuration (values already validated).

  Raises:
    ConfigError: ``rl.objective="spg"`` with ``rl.beta > 0``, an estimator of
      :data:`SPG_REFUSED_LIKELIHOODS`; ``rl.likelihood="spg_block"`` whose ``block_length`` does not
      divide ``rollout.gen_length`` or whose ``num_t`` exceeds the block count.
  """
  rl = cfg.rl
  if rl.likelihood == "spg_block":
    blk = cfg.likelihood.spg_block
    size = blk.block_length or cfg.rollout.block_length  # 0: the rollout's blocks
    if cfg.rollout.gen_length % size:
      raise ConfigError("likelihood.spg_block.block_length", blk.block_length,
                        f"a divisor of rollout.gen_length={cfg.rollout.gen_length} (SPG masks whole blocks)")
    if blk.num_t > cfg.rollout.gen_length // size:
      raise ConfigError("likelihood.spg_block.num_t", blk.num_t,
                        f"<= the {cfg.rollout.gen_length // size} blocks of {size} positions of the completion "
                        "(one block per context, SPG asserts num_t <= num_blocks)")
  if rl.objective != "spg":
    return
  if rl.beta > 0:
    raise ConfigError("rl.beta", rl.beta, "0 with rl.objective='spg' (SPG has no KL term: its trainer "
                      "raises NotImplementedError for beta != 0)")
  if rl.likelihood in SPG_REFUSED_LIKELIHOODS:
    raise ConfigError("rl.likelihood", rl.likelihood,
                      f"an estimator of plain log-probs with rl.objective='spg' ({SPG_REFUSED_LIKELIHOODS[rl.likelihood]})")


METHOD = Method(spg_loss, reads_old=False, check=check_spg_config,
                sequence_reason="SPG picks its bound by the sign of the sequence advantage; per-token advantages "
                "have no sign per sequence")
