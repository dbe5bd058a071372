"""Monte-Carlo ELBO of BGPO (Lin et al. 2025, "Boundary-Guided Policy Optimization for
Memory-efficient RL of Diffusion Large Language Models", arXiv 2510.11683; code THU-KEG/BGPO).

The masked-diffusion evidence lower bound of the completion,
``ELBO(o) = E_t E_{y_t}[(1/t) Σ_i 1[o_i masked in y_t] log p_θ(o_i | y_t)]``, estimated with n_t
Monte-Carlo samples (t_j, y_j): one forward pass each, ``ELBO ≈ (1/n_t) Σ_j E_j`` with the sample's
own estimate ``E_j = (1/t_j) Σ_i m_ji log p_θ(o_i | y_j)``. BGPO's bound (:mod:`daca_jax.rl.methods.bgpo`) is
a sum of terms that each read one sample's ``E_j``, which is why the samples are returned as S = n_t
contexts (:class:`~daca_jax.contracts.TokenScores` of kind ``"elbo"``, factor ``1/(n_t t_j)``).

Sampling (this library's choice where BGPO's code could not be read offline): t_j in the j-th of n_t
equal bins (``elbo_mc.stratified_t``, lower variance; i.i.d. U otherwise), mapped to
``[T_MIN, 1]`` as LLaDA's forward process does (``t = ε + (1 − ε) u``) so that ``1/t`` stays bounded;
each completion token masked independently with probability t_j; the prompt masked with
``p_mask_prompt`` once for all samples.

The passes run vectorised, or ``strata_batch`` at a time (``lax.map``, rematerialised); the per-pass
form (:mod:`daca_jax.likelihood.passes`) runs one, for :mod:`daca_jax.rl.pass_accum`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from daca_jax.contracts import TokenScores
from daca_jax.likelihood.base import EstimatorOptions, estimator, split_key
from daca_jax.likelihood.common import mask_prompt, score_targets
from daca_jax.likelihood.passes import per_pass
from daca_jax.config.checks import _check_fields, _positive


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

T_MIN = 1e-3  # LLaDA's forward process: p_mask = (1 - eps) t + eps, eps = 1e-3


def mc_samples(key: jax.Array, batch: int, length: int, samples: int,
               stratified_t: bool) -> tuple[jax.Array, jax.Array]:
  """The n_t samples' masking rates and masks.

  Args:
    key: PRNG key (the estimator key, after the prompt-mask split).
    batch: B; length: L; samples: n_t.
    stratified_t: t_j in bin j of n_t equal bins (else i.i.d.).
  Returns:
    (t float32 [n_t, B] in [T_MIN, 1], masked bool [n_t, B, L]).
  """
  k_t, k_m = jax.random.split(key)
  u = jax.random.uniform(k_t, (samples, batch))
  if stratified_t:
    u = (jnp.arange(samples, dtype=jnp.float32)[:, None] + u) / samples
  t = T_MIN + (1.0 - T_MIN) * u
  masked = jax.random.uniform(k_m, (samples, batch, length)) < t[:, :, None]
  return t, masked


def _setup(tokens: jax.Array, prompt_len: int, key: jax.Array, mask_id: int, elbo_mc: ELBOMCConfig,
           p_mask_prompt: float):
  k_prompt, k_est = split_key(key)
  b, total = tokens.shape
  prompt = mask_prompt(k_prompt, tokens[:, :prompt_len], p_mask_prompt, mask_id)
  comp = tokens[:, prompt_len:]
  t, masked = mc_samples(k_est, b, total - prompt_len, elbo_mc.samples, elbo_mc.stratified_t)
  return prompt, comp, t, masked


def _scores(per_sample: jax.Array, t: jax.Array, masked: jax.Array) -> TokenScores:
  """[n, B, L] log-probs, [n, B] rates, [n, B, L] masks -> TokenScores (context-major targets)."""
  n, b, length = per_sample.shape
  weight = jnp.broadcast_to((1.0 / (n * t))[:, :, None], per_sample.shape)
  flat = lambda x: jnp.transpose(x, (1, 0, 2)).reshape(b, n * length)
  return TokenScores(logp=flat(per_sample), mask=flat(masked.astype(jnp.float32)), weight=flat(weight),
                     num_states=n, kind="elbo")


@estimator("elbo_mc")
def elbo_mc_logprobs(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array,
                     *, mask_id: int, elbo_mc: ELBOMCConfig = ELBOMCConfig(),
                     p_mask_prompt: float = EstimatorOptions.p_mask_prompt,
                     strata_batch: int = EstimatorOptions.strata_batch) -> TokenScores:
  """The n_t Monte-Carlo samples' targets (kind ``"elbo"``, S = n_t, factor ``1/(n_t t_j)``;
  ``contributions()`` row sums are the ELBO estimate); n_t forward passes.

  Args:
    tokens: int32 [B, P+L]; key: fixes t_j and the masks (shared by θ, θ_old, θ_ref).
    elbo_mc: ``samples`` n_t, ``stratified_t``; p_mask_prompt, strata_batch: as in
      :class:`~daca_jax.config.likelihood.LikelihoodConfig`.
  """
  prompt, comp, t, masked = _setup(tokens, prompt_len, key, mask_id, elbo_mc, p_mask_prompt)

  def one(mk: jax.Array) -> jax.Array:
    x = jnp.concatenate([prompt, jnp.where(mk, mask_id, comp)], axis=1)
    return score_targets(logits_fn, params, x, comp, prompt_len, mask_id)

  if strata_batch and strata_batch < elbo_mc.samples:
    per_sample = jax.lax.map(jax.checkpoint(one, prevent_cse=False), masked, batch_size=strata_batch)
  else:
    per_sample = jax.vmap(one)(masked)  # [n, B, L]
  return _scores(per_sample, t, masked)


@per_pass("elbo_mc", lambda cfg: cfg.elbo_mc.samples)
def elbo_mc_one_pass(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array,
                     *, mask_id: int, pass_index: jax.Array, elbo_mc: ELBOMCConfig = ELBOMCConfig(),
                     p_mask_prompt: float = EstimatorOptions.p_mask_prompt) -> tuple[TokenScores, jax.Array]:
  """:func:`elbo_mc_logprobs` with only sample ``pass_index`` scored (the others' log-probs 0), and
  the bool [B, n·L] targets of that sample: one forward pass."""
  prompt, comp, t, masked = _setup(tokens, prompt_len, key, mask_id, elbo_mc, p_mask_prompt)
  mk = jax.lax.dynamic_index_in_dim(masked, pass_index, keepdims=False)
  x = jnp.concatenate([prompt, jnp.where(mk, mask_id, comp)], axis=1)
  lp = score_targets(logits_fn, params, x, comp, prompt_len, mask_id)  # [B, L]
  per_sample = jnp.zeros(masked.shape, jnp.float32).at[pass_index].set(lp)
  scores = _scores(per_sample, t, masked)
  n, b, length = masked.shape
  here = jnp.broadcast_to(jnp.arange(n * length)[None] // length == pass_index, (b, n * length))
  return scores, here
