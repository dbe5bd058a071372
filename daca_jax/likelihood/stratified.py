"""Stratified Masking Likelihood (SML), the likelihood of DACA-GRPO (arXiv 2605.16342).

The L completion positions are split into K strata (a fresh random permutation per sequence and per
key, by default). Pass k masks stratum k and keeps every other completion token visible, so each token
is scored with about (K−1)/K of the completion as context; ``logp_i`` is read from the pass that masks
i, so every token is scored exactly once. Pass k therefore projects and log-normalises only the
⌈L/K⌉ positions of stratum k (:func:`stratum_positions`), so the output head and log-softmax cost one
pass in total rather than K. The K passes are vectorised with ``jax.vmap``, or run ``strata_batch`` at
a time (``lax.map``, rematerialised) so that a gradient step keeps the activations of ``strata_batch``
passes rather than K. K = 1 is the mean-field estimate, K = L the pseudo-likelihood.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from daca_jax.config.checks import STRATA_PARTITIONS, _check_fields, _one_of, _positive
from daca_jax.contracts import TokenScores, token_scores
from daca_jax.likelihood.base import EstimatorOptions, estimator, split_key
from daca_jax.likelihood.common import mask_prompt, score_positions
from daca_jax.likelihood.passes import per_pass


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


def _rank(keys: jax.Array) -> jax.Array:
  """Rank (0..L-1) of each entry along the last axis, ascending, ties to the lower index."""
  return jnp.argsort(jnp.argsort(keys, axis=-1, stable=True), axis=-1, stable=True).astype(jnp.int32)


def prompt_keys(key: jax.Array, prompt: jax.Array) -> jax.Array:
  """One PRNG key per row, a function of ``key`` and the row's prompt tokens only.

  Rows with the same prompt (the G completions of one GRPO group) get the same key; different
  prompts get different keys (up to a 32-bit hash collision, which only correlates two rows' draws).

  Args:
    key: PRNG key.
    prompt: int32 [B, P] prompt tokens.
  Returns:
    [B] keys (``jax.random.fold_in(key, hash(prompt[b]))``).
  """
  mult = (jnp.arange(prompt.shape[1], dtype=jnp.uint32) * jnp.uint32(2654435761)) | jnp.uint32(1)
  h = jnp.sum(prompt.astype(jnp.uint32) * mult[None, :] + jnp.uint32(0x9E3779B9), axis=-1, dtype=jnp.uint32)
  h = h ^ (h >> 15)
  return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, h)


PARTITIONS = STRATA_PARTITIONS


def assign_strata(key: jax.Array, batch: int, length: int, num_strata: int, partition: str = "random",
                  commit_step: jax.Array | None = None, prompt: jax.Array | None = None) -> jax.Array:
  """Stratum index of every completion position.

  Strata have equal sizes up to one token (``stratum = rank * K // L``).

  Args:
    key: PRNG key (used by "random", "per_prompt" and for tie-breaking in "commit_order").
    batch: B; length: L; num_strata: K (1 <= K <= L).
    partition: "random" (fresh permutation per sequence), "per_prompt" (a fresh permutation per
      prompt: rows with the same prompt tokens share it, so the completions of one group score a
      token they agree on in the same pass, i.e. with common random masks), "strided" (i mod K),
      "contiguous" (consecutive runs), or "commit_order" (positions committed at nearby steps share
      a stratum).
    commit_step: int32 [B, L], required for "commit_order".
    prompt: int32 [B, P] prompt tokens, required for "per_prompt".
  Returns:
    int32 [B, L] in [0, K).
  Raises:
    ValueError: K outside [1, L], unknown partition, commit_order without commit_step or per_prompt
      without prompt.
  """
  if not 1 <= num_strata <= length:
    raise ValueError(f"likelihood.stratified.num_strata={num_strata} must be in [1, L={length}]")
  pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))
  if partition == "random":
    rank = _rank(jax.random.uniform(key, (batch, length)))
  elif partition == "per_prompt":
    if prompt is None:
      raise ValueError("likelihood.stratified.partition='per_prompt' needs the prompt tokens")
    if prompt.shape[0] != batch:
      raise ValueError(f"assign_strata: prompt has {prompt.shape[0]} rows, expected batch={batch}")
    keys = prompt_keys(key, prompt)
    rank = _rank(jax.vmap(lambda k: jax.random.uniform(k, (length,)))(keys))
  elif partition == "strided":
    return pos % num_strata
  elif partition == "contiguous":
    rank = pos
  elif partition == "commit_order":
    if commit_step is None:
      raise ValueError("likelihood.stratified.partition='commit_order' needs the trajectory's commit_step")
    jitter = jax.random.uniform(key, (batch, length))
    rank = _rank(commit_step.astype(jnp.float32) + 0.5 * jitter)
  else:
    raise ValueError(f"likelihood.stratified.partition={partition!r} is not one of {list(PARTITIONS)}")
  return rank * num_strata // length


def stratum_positions(strata: jax.Array, num_strata: int) -> tuple[jax.Array, jax.Array]:
  """The completion positions of every stratum, padded to one static width C = ⌈L/K⌉.

  Args:
    strata: int32 [B, L] stratum of each position (:func:`assign_strata`); every stratum non-empty.
    num_strata: K.
  Returns:
    (positions int32 [K, B, C], valid bool [K, B, C]): row b of stratum k lists its positions in
    increasing order; a stratum with fewer than C positions repeats its last one, marked invalid.
    Over k and the valid slots, every position of a row appears exactly once.
  """
  b, length = strata.shape
  width = -(-length // num_strata)
  order = jnp.argsort(strata, axis=-1, stable=True).astype(jnp.int32)  # [B, L] grouped by stratum
  counts = jnp.sum(strata[:, None, :] == jnp.arange(num_strata)[None, :, None], axis=-1)  # [B, K]
  starts = jnp.cumsum(counts, axis=-1) - counts
  j = jnp.arange(width)
  slot = starts[..., None] + jnp.minimum(j, jnp.maximum(counts[..., None] - 1, 0))  # [B, K, C]
  positions = jnp.take_along_axis(order, slot.reshape(b, -1), axis=1).reshape(b, num_strata, width)
  valid = j < counts[..., None]
  return positions.transpose(1, 0, 2), valid.transpose(1, 0, 2)


@estimator("stratified")
def stratified_logprobs(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int,
                        key: jax.Array, *, mask_id: int, commit_step: jax.Array | None = None,
                        stratified: StratifiedConfig = StratifiedConfig(),
                        p_mask_prompt: float = EstimatorOptions.p_mask_prompt,
                        strata_batch: int = EstimatorOptions.strata_batch) -> jax.Array:
  """Per-token SML log-probs.

  Args:
    logits_fn: pure ``(params, tokens[B, T]) -> logits[B, T, V]``.
    tokens: int32 [B, P+L] rollout sequences.
    prompt_len: P (static).
    key: PRNG key: prompt mask (shared by the K passes) and the partition.
    mask_id: ``[MASK]`` id.
    commit_step: int32 [B, L], needed for ``partition="commit_order"``.
    stratified: ``num_strata`` K and ``partition`` (``likelihood.stratified``).
    p_mask_prompt, strata_batch: as in :class:`~daca_jax.config.likelihood.LikelihoodConfig`.
  Returns:
    float32 [B, L]; costs K forward passes of batch B (the output head: one pass in total).
  """
  prompt, comp, strata, positions, valid = _plan(tokens, prompt_len, key, mask_id, commit_step, stratified,
                                                 p_mask_prompt)
  b, length = comp.shape
  one_pass = lambda xs: _stratum_pass(logits_fn, params, prompt, comp, strata, mask_id, *xs)
  xs = (jnp.arange(stratified.num_strata, dtype=jnp.int32), positions)
  if strata_batch and strata_batch < stratified.num_strata:
    # Rematerialised per group: the backward pass re-runs each group's forward instead of keeping
    # the activations of all K passes, so memory is that of ``strata_batch`` passes (one more
    # forward per pass in a gradient step).
    body = jax.checkpoint(one_pass, prevent_cse=False)
    per_pass = jax.lax.map(body, xs, batch_size=strata_batch)
  else:
    per_pass = jax.vmap(one_pass)(xs)  # [K, B, C]
  rows = jnp.arange(b)[None, :, None]
  # Every position is one valid slot; the padding slots add zero.
  return jnp.zeros((b, length), jnp.float32).at[rows, positions].add(jnp.where(valid, per_pass, 0.0))


def _plan(tokens: jax.Array, prompt_len: int, key: jax.Array, mask_id: int, commit_step: jax.Array | None,
          stratified: StratifiedConfig, p_mask_prompt: float):
  """(masked prompt [B, P], completion [B, L], strata [B, L], positions and valid [K, B, C]) of SML
  under ``key``: what every pass shares."""
  k_prompt, k_part = split_key(key)
  b, total = tokens.shape
  length = total - prompt_len
  # per_prompt keys off the unmasked prompt, so prompt masking cannot split a group's strata.
  strata = assign_strata(k_part, b, length, stratified.num_strata, stratified.partition, commit_step,
                         prompt=tokens[:, :prompt_len])
  prompt = mask_prompt(k_prompt, tokens[:, :prompt_len], p_mask_prompt, mask_id)
  positions, valid = stratum_positions(strata, stratified.num_strata)  # [K, B, C]
  return prompt, tokens[:, prompt_len:], strata, positions, valid


def _stratum_pass(logits_fn: Any, params: Any, prompt: jax.Array, comp: jax.Array, strata: jax.Array,
                  mask_id: int, k: jax.Array, pos: jax.Array) -> jax.Array:
  """float32 [B, C] pass k: stratum k masked, its positions ``pos`` [B, C] scored."""
  x = jnp.concatenate([prompt, jnp.where(strata == k, mask_id, comp)], axis=1)
  targets = jnp.take_along_axis(comp, pos, axis=1)
  return score_positions(logits_fn, params, x, targets, pos + prompt.shape[1], mask_id)


@per_pass("stratified", lambda cfg: cfg.stratified.num_strata)
def stratified_one_pass(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array, *,
                        mask_id: int, pass_index: jax.Array, commit_step: jax.Array | None = None,
                        stratified: StratifiedConfig = StratifiedConfig(),
                        p_mask_prompt: float = EstimatorOptions.p_mask_prompt) -> tuple[TokenScores, jax.Array]:
  """SML's pass ``pass_index`` alone (:mod:`daca_jax.likelihood.passes`): the log-probs of stratum
  ``pass_index`` (0 elsewhere) and bool [B, L] its positions; one forward pass."""
  prompt, comp, strata, positions, valid = _plan(tokens, prompt_len, key, mask_id, commit_step, stratified,
                                                 p_mask_prompt)
  pos = jax.lax.dynamic_index_in_dim(positions, pass_index, keepdims=False)
  ok = jax.lax.dynamic_index_in_dim(valid, pass_index, keepdims=False)
  lp = _stratum_pass(logits_fn, params, prompt, comp, strata, mask_id, pass_index, pos)
  rows = jnp.arange(comp.shape[0])[:, None]
  logp = jnp.zeros(comp.shape, jnp.float32).at[rows, pos].add(jnp.where(ok, lp, 0.0))
  return token_scores(logp), strata == pass_index
