"""ESPO, ELBO-based Sequence-level Policy Optimization (Ou et al. 2025, "Principled and Tractable RL for
Reasoning with Diffusion Language Models"; ML-GSAI/ESPO).

Sources: ``espo/espo_trainer.py``: ``ESPOTrainer.compute_loss`` (ratio, clip, KL), ``compute_approx_kl``
(``"k2"``), ``ESPOTrainer._generate_and_score_completions`` (``leave_one_out = True``: RLOO advantages,
:func:`daca_jax.rl.advantages.rloo_advantages`), ``ESPOTrainer._get_elbo`` (the likelihood:
:mod:`daca_jax.likelihood.espo_elbo`).

The whole completion is one action; its log-likelihood is the ELBO ``E_b = Σ_i c_bi`` (the estimator's
per-token terms, read with ``likelihood.elbo_terms="summed"``). With L the completion length (all
positions, as ESPO's ``logits_to_keep``):

* ``ρ_b = exp((E_b − E_b^old) / L)``, the per-token geometric-mean ratio;
* ``E_b`` sums the positions the objective reads (:func:`espo_positions`): all L, the padding after the
  first EOS included, as ESPO does (``likelihood.espo_elbo.padding="score"``, the ESPO presets), or those
  inside the completion mask (``"mask"``);
* ``loss = mean_b −min(ρ_b A_b, clip(ρ_b, 1−ε, 1+ε) A_b) + β · mean_b (E_b − E_b^ref)² / (2L)``
  (the k2 estimator on the sequence ELBO, ``Σ k2 / (B·L)`` in ESPO).

Credit: the ratio's exponent is the credit-weighted ELBO difference ``Σ_i w_i (c_i − c_i^old) / L``
(token credits re-weight which tokens' likelihood moves the sequence ratio; ``uniform`` is ESPO
exactly); the KL stays on the unweighted ELBO. Per-token advantages are refused (one advantage per
sequence-level action).

SML and other estimators: ``E_b`` is then the sum of the estimator's per-token log-probs (SML,
mean-field, trajectory), so the ratio is the length-normalised sequence likelihood ratio. Refused:
``rldf`` (its targets are (state, position) pairs, not one term per token), ``spg_block`` (its
per-context log-probs carry no 1/t factor: their sum is not a likelihood) and
``likelihood.elbo_terms="per_target"`` (the ELBO factors would move into the credit weights, and the
KL's ELBO would carry the credit).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from daca_jax.contracts import PolicyBatch
from daca_jax.errors import ConfigError, ShapeError
from daca_jax.rl.methods.base import Aux, JobConfig, LossOptions, Method, clipped_surrogate, objective, sequence_advantages_only


ESPO_REFUSED_LIKELIHOODS = {
    "rldf": "its targets are (rollout state, position) pairs, not one likelihood term per token",
    "spg_block": "its per-context log-probs carry no 1/t factor, so their sum is not a sequence likelihood",
}


@objective("espo")
def espo_loss(logp: jax.Array, batch: PolicyBatch, *, clip_eps: float = LossOptions.clip_eps,
              beta: float = LossOptions.beta) -> tuple[jax.Array, Aux]:
  """ESPO's clipped sequence-level ELBO-ratio loss with the k2 KL (module docstring).

  Args:
    logp: float32 [B, L] the current policy's per-token ELBO terms (or log-probs), differentiable.
    batch: ``logp_old``, ``logp_ref``, ``mask``, ``weights`` [B, L]; ``advantages`` [B].
    clip_eps: ε (``rl.clip_eps``; ESPO: 0.2, Countdown 0).
    beta: β of the k2 KL on the sequence ELBO (``rl.beta``; ESPO: 1e-3 to 1e-2).
  Returns:
    (scalar loss, aux with "pg_loss", "kl" (the k2 term before β), "clip_frac", "ratio_mean").
  Raises:
    ValueError: ``batch.token_advantages`` set.
    ShapeError: ``logp`` is not one term per completion position (``batch.completion_mask``'s L).
  """
  sequence_advantages_only(batch, "espo")
  length = logp.shape[-1]
  if batch.completion_mask is not None and batch.completion_mask.shape[-1] != length:
    raise ShapeError("espo: logp", logp.shape, f"[B, L={batch.completion_mask.shape[-1]}]: one ELBO term per "
                     "completion position (likelihood.elbo_terms='summed')")
  m = batch.mask
  log_ratio = jnp.sum(m * batch.weights * (logp - batch.logp_old), -1) / length  # [B]
  ratio = jnp.exp(log_ratio)
  surrogate, binding = clipped_surrogate(ratio, batch.advantages, clip_eps)
  pg = jnp.mean(-surrogate)
  d_ref = jnp.sum(m * (logp - batch.logp_ref), -1)  # E_b − E_b^ref
  kl = jnp.mean(0.5 * jnp.square(d_ref)) / length
  loss = pg + beta * kl
  aux = {"pg_loss": pg, "kl": kl, "clip_frac": jnp.mean(binding.astype(jnp.float32)),
         "ratio_mean": jnp.mean(ratio)}
  return loss, aux


def espo_positions(cfg: JobConfig, completion_mask: jax.Array, weights: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The completion positions ESPO's loss reads and their credit weights (``Method.positions``): all L
  when it scores the padding (``likelihood.espo_elbo.padding="score"``, ESPO's ``compute_loss``), the
  padding's weight 1 (a credit assigner weighs only the completion's tokens); else ``completion_mask``
  (float32 [B, L], 1 up to and including the first EOS) and ``weights`` as they are."""
  if cfg.likelihood.espo_elbo.padding == "score":
    return jnp.ones_like(completion_mask), jnp.where(completion_mask > 0, weights, 1.0)
  return completion_mask, weights


def check_espo_config(cfg: JobConfig) -> None:
  """Refuses the ESPO combinations that are not meaningful (one-line ConfigError with the reason).

  Args:
    cfg: the configuration (values already validated).
  Raises:
    ConfigError: ``likelihood.espo_elbo.stratify="batch"`` with ``rl.grad_accum > 1`` or ``pmap``; ``rl.objective="espo"``
      with ``likelihood.elbo_terms="per_target"``, an estimator of
      :data:`ESPO_REFUSED_LIKELIHOODS`.
  """
  rl = cfg.rl
  per_row = rl.grad_accum > 1 or cfg.parallel.strategy == "pmap"  # each row drawn under its own key
  if rl.likelihood == "espo_elbo" and cfg.likelihood.espo_elbo.stratify == "batch" and per_row:
    raise ConfigError("likelihood.espo_elbo.stratify", "batch", "'row' with rl.grad_accum > 1 or parallel.strategy="
                      "'pmap' (each row's masks are drawn from its own key there, so there is no batch of rows to "
                      "stratify over)")
  if rl.objective != "espo":
    return
  if rl.likelihood in ESPO_REFUSED_LIKELIHOODS:
    raise ConfigError("rl.likelihood", rl.likelihood,
                      f"a sequence-likelihood estimator with rl.objective='espo' ({ESPO_REFUSED_LIKELIHOODS[rl.likelihood]})")
  if cfg.likelihood.elbo_terms != "summed":
    raise ConfigError("likelihood.elbo_terms", cfg.likelihood.elbo_terms,
                      "'summed' with rl.objective='espo' (its ratio and k2 KL are on the sequence ELBO, the sum "
                      "of each token's ELBO term; 'per_target' moves the ELBO factors into the credit weights)")


METHOD = Method(espo_loss, advantage="rloo", sequence_reason="one advantage per sequence-level action; a "
                "per-token advantage has no sequence ratio to scale", check=check_espo_config, positions=espo_positions)
