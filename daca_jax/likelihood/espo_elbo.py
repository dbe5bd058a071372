"""ESPO's ELBO estimator: stratified mask counts with coupled complements (Ou et al. 2025, ML-GSAI/ESPO).

Source: ``espo/espo_trainer.py``: ``forward_process`` (the mask counts) and ``ESPOTrainer._get_elbo``
(the two passes and their factors), averaged over ``num_mc`` draws by ``ESPOTrainer._get_elbo_mc``.

One draw over a completion of L positions: a mask count ``x ∈ {0, …, L}``, ``x`` positions chosen
uniformly, masked (pass 1) and scored with the factor ``(L+1)/x`` (ESPO divides the cross-entropy by
``p_mask = x/(L+1)``); with ``coupled`` (ESPO's ``reduce_var``) the complement is masked in pass 2 and
its positions scored with ``(L+1)/(L−x)`` (ESPO's ``L/(L+1) − p_mask``), and the two passes are
averaged, so every position is scored exactly once per draw. The counts are stratified: ESPO draws an
offset ``k ~ U{0, …, L}`` and gives row r of the B rows of a call ``x_r = round(k + r(L+1)/B) mod (L+1)``
(``likelihood.espo_elbo.stratify="batch"``); ``"row"`` stratifies the ``num_mc`` draws of one sequence the
same way instead (``x_m = round(k + m(L+1)/M) mod (L+1)``), which keeps the masks row-local (per-row keys
under ``rl.grad_accum`` and data parallelism).

The counts span all L completion positions, the padding after the first EOS included, as ESPO's do;
ESPO also *scores* the padding (it applies no completion mask to the ELBO); ``padding="score"`` (the ESPO
presets) does the same, and ``"mask"`` keeps only the targets inside the completion mask, the learner's rule
for every other estimator.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from daca_jax.contracts import TokenScores
from daca_jax.likelihood.base import EstimatorOptions, estimator, split_key
from daca_jax.likelihood.common import mask_prompt, score_targets
from daca_jax.config.checks import _check_fields, _one_of, _positive

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


def stratified_counts(key: jax.Array, num: int, length: int) -> jax.Array:
  """``num`` stratified mask counts in ``{0, …, L}``: ``round(k + i(L+1)/num) mod (L+1)`` with one
  uniform offset ``k``. int32 [num]."""
  k = jax.random.randint(key, (), 0, length + 1).astype(jnp.float32)
  grid = k + jnp.arange(num, dtype=jnp.float32) * ((length + 1) / num)
  return (jnp.round(grid).astype(jnp.int32)) % (length + 1)


def espo_counts(key: jax.Array, batch: int, length: int, num_mc: int, stratify: str) -> jax.Array:
  """int32 [num_mc, B] mask counts per draw and row (module docstring).

  Raises:
    ValueError: ``stratify`` not "row" or "batch".
  """
  if stratify == "batch":  # one offset per draw, shared by the rows of this call
    return jax.vmap(lambda k: stratified_counts(k, batch, length))(jax.random.split(key, num_mc))
  if stratify == "row":  # one offset per row, shared by its draws
    return jax.vmap(lambda k: stratified_counts(k, num_mc, length))(jax.random.split(key, batch)).T
  raise ValueError(f"likelihood.espo_elbo.stratify={stratify!r} is not 'row' or 'batch'")


def exact_count_masks(key: jax.Array, counts: jax.Array, length: int) -> jax.Array:
  """bool [..., L]: ``counts[...]`` positions masked, chosen uniformly (ranks of uniform noise)."""
  noise = jax.random.uniform(key, (*counts.shape, length))
  rank = jnp.argsort(jnp.argsort(noise, axis=-1), axis=-1)
  return rank < counts[..., None]


@estimator("espo_elbo")
def espo_elbo_logprobs(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array,
                       *, mask_id: int, espo_elbo: ESPOELBOConfig = ESPOELBOConfig(),
                       p_mask_prompt: float = EstimatorOptions.p_mask_prompt,
                       strata_batch: int = EstimatorOptions.strata_batch) -> TokenScores:
  """ESPO's ELBO targets (kind ``"elbo"``; ``contributions()`` [B, L] are the per-token ELBO terms, whose
  row sum is ESPO's sequence ELBO).

  Args:
    logits_fn: pure ``(params, tokens[B, T]) -> logits[B, T, V]`` (or a ModelFns).
    tokens: int32 [B, P+L] rollout sequences.
    prompt_len: P (static).
    key: PRNG key (prompt mask, counts, positions).
    mask_id: ``[MASK]`` id.
    espo_elbo: ``num_mc``, ``coupled``, ``stratify`` (``likelihood.espo_elbo``).
    p_mask_prompt: prompt masking of the library's estimators (ESPO masks no prompt token: 0).
    strata_batch: 0 vectorises the passes; 0 < n < passes runs n at a time (``lax.map``, rematerialised).
  Returns:
    TokenScores with S = ``num_mc`` (×2 with ``coupled``) contexts, draw-major (draw m's pass 1, then
    its complement): ``weight`` the ELBO factor of each target divided by the passes averaged over.
    Costs S forward passes of batch B.
  """
  k_prompt, k_est = split_key(key)
  k_count, k_pos = jax.random.split(k_est)
  b, total = tokens.shape
  length = total - prompt_len
  m = espo_elbo.num_mc
  counts = espo_counts(k_count, b, length, m, espo_elbo.stratify)  # [M, B]
  first = exact_count_masks(k_pos, counts, length)  # [M, B, L]
  x = counts.astype(jnp.float32)[..., None]
  share = 1.0 / (m * (2 if espo_elbo.coupled else 1))
  # Zero, not inf, where a pass has no target (x = 0 or x = L): 0·inf would be NaN.
  f_first = jnp.where(x > 0, (length + 1) / jnp.maximum(x, 1.0), 0.0)
  if espo_elbo.coupled:
    f_second = jnp.where(x < length, (length + 1) / jnp.maximum(length - x, 1.0), 0.0)
    masks = jnp.stack([first, ~first], axis=1).reshape(2 * m, b, length)  # draw-major
    factors = jnp.stack([f_first, f_second], axis=1).reshape(2 * m, b, 1)
  else:
    masks, factors = first, f_first
  prompt = mask_prompt(k_prompt, tokens[:, :prompt_len], p_mask_prompt, mask_id)
  comp = tokens[:, prompt_len:]

  def one_pass(mk: jax.Array) -> jax.Array:
    xin = jnp.concatenate([prompt, jnp.where(mk, mask_id, comp)], axis=1)
    return score_targets(logits_fn, params, xin, comp, prompt_len, mask_id)  # [B, L]

  s = masks.shape[0]
  if strata_batch and strata_batch < s:
    per_pass = jax.lax.map(jax.checkpoint(one_pass, prevent_cse=False), masks, batch_size=strata_batch)
  else:
    per_pass = jax.vmap(one_pass)(masks)  # [S, B, L]
  weight = jnp.broadcast_to(factors * share, per_pass.shape)
  flat = lambda v: jnp.transpose(v, (1, 0, 2)).reshape(b, s * length)  # context-major [B, S·L]
  return TokenScores(logp=flat(per_pass), mask=flat(masks.astype(jnp.float32)), weight=flat(weight),
                     num_states=s, kind="elbo")
