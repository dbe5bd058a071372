"""SPG's block-wise masked contexts (Sandwiched Policy Gradient, Wang et al. 2025, facebookresearch/SPG).

Source: ``spg/spg_trainer.py``, ``SPGTrainer.forward_process`` with ``forward_type="block_random"`` (the
recipe of every ``spg/slurm_scripts/spg_*/*.sbatch``) and ``SPGTrainer._get_per_seq_logps`` (which
positions are scored). For each of ``num_t`` contexts of a sequence of ``len`` valid completion
positions (the completion mask: up to and including the first EOS):

1. a block index ``k`` among the blocks holding valid positions: the first ``num_t`` entries of a random
   permutation of the ``L / block_length`` block indices, each taken modulo the number of valid blocks
   (SPG's choice, which is not uniform when the two counts differ);
2. the completion positions of earlier blocks stay clean, those of later blocks (and every position
   after the completion mask) are masked;
3. in block ``k``, of its ``n_k = min(block_length, len − k·block_length)`` valid positions a uniformly
   random subset of ``c ~ U{max(⌊n_k·min_t⌋, 1), …, min(⌊n_k·max_t⌋, n_k)}`` is masked;
4. with ``likelihood.p_mask_prompt = p > 0`` every position that step 2 left clean — the prompt *and
   the clean completion blocks* — is masked with probability p, drawn per context (SPG's
   ``is_mask_prompt = ~is_mask & (rand < p_mask_prompt)`` spans the whole sequence, not the prompt only);
   completion positions masked this way are scored too.

Where ``⌊n_k·max_t⌋ < 1`` (e.g. ``max_t = 0``) SPG's assertion ``start <= end`` would fail; here one position
is masked. The random draws are JAX's, not torch's: the same distribution, not the same masks.

The targets of a context are its masked completion positions (SPG's ``perturb_mask``; the learner
intersects them with the completion mask). This module only builds the contexts and scores them: the
lower and upper bounds and their 1/t factors (``t`` = the context's share of masked valid positions) are
computed by the objective (:mod:`daca_jax.rl.methods.spg`), which needs the per-context structure. With any
other objective the targets are plain per-context log-probs (kind ``"logprob"``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from daca_jax.contracts import TokenScores
from daca_jax.likelihood.base import EstimatorOptions, estimator, split_key
from daca_jax.likelihood.common import score_targets
from daca_jax.config.checks import _check_fields, _non_negative, _positive
from daca_jax.errors import ConfigError


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


def spg_block_masks(key: jax.Array, lengths: jax.Array, gen_length: int, num_t: int, block_length: int,
                    min_t: float, max_t: float) -> tuple[jax.Array, jax.Array]:
  """The masks of steps 1-3 (module docstring), without the ``p_mask_prompt`` step.

  Args:
    key: PRNG key.
    lengths: int32 [B] valid completion positions per row (>= 1; the completion mask's row sums).
    gen_length: L (static), a multiple of ``block_length``.
    num_t: contexts per row (static), at most ``L / block_length``.
    block_length, min_t, max_t: as in :class:`~daca_jax.likelihood.spg_block.SPGBlockConfig`.
  Returns:
    (masked, earlier): bool [num_t, B, L] each: True where the completion position is masked in that
    context, and where it lies in a block before the chosen one (the positions step 4 may mask).
  Raises:
    ValueError: ``block_length`` does not divide L, or ``num_t`` exceeds the block count (trace time).
  """
  if block_length <= 0:
    raise ValueError("likelihood.spg_block.block_length must be set (the learner fills 0 with rollout.block_length)")
  if gen_length % block_length:
    raise ValueError(f"likelihood.spg_block.block_length={block_length} must divide the completion length {gen_length}")
  num_blocks = gen_length // block_length
  if num_t > num_blocks:
    raise ValueError(f"likelihood.spg_block.num_t={num_t} exceeds the {num_blocks} blocks of the completion")
  b = lengths.shape[0]
  k_perm, k_num, k_pos = jax.random.split(key, 3)
  lengths = jnp.maximum(lengths.astype(jnp.int32), 1)
  valid_blocks = (lengths - 1) // block_length + 1  # [B]
  perms = jax.vmap(lambda k: jax.random.permutation(k, num_blocks))(jax.random.split(k_perm, b))  # [B, nb]
  block = (perms[:, :num_t] % valid_blocks[:, None]).T.astype(jnp.int32)  # [T, B]
  n_in = jnp.minimum(block_length, lengths[None, :] - block_length * block)  # [T, B] valid positions in it
  n_f = n_in.astype(jnp.float32)
  lo = jnp.maximum(jnp.floor(n_f * min_t).astype(jnp.int32), 1)
  hi = jnp.minimum(jnp.floor(n_f * max_t).astype(jnp.int32), n_in)
  hi = jnp.maximum(hi, lo)  # max_t·n_k < 1 (e.g. max_t = 0): SPG asserts lo <= hi; one position then
  count = jax.random.randint(k_num, (num_t, b), lo, hi + 1)  # [T, B]
  pos = jnp.arange(gen_length, dtype=jnp.int32)
  pos_block = pos // block_length  # [L]
  offset = pos[None, None, :] - block_length * block[..., None]  # [T, B, L] offset inside the chosen block
  in_block = pos_block[None, None, :] == block[..., None]
  candidate = in_block & (offset < n_in[..., None])
  # A uniform subset of `count` candidates: the candidates ranked by uniform noise (others pushed behind).
  noise = jax.random.uniform(k_pos, (num_t, b, gen_length)) + jnp.where(candidate, 0.0, 2.0)
  rank = jnp.argsort(jnp.argsort(noise, axis=-1), axis=-1)
  chosen = candidate & (rank < count[..., None])
  later = pos_block[None, None, :] > block[..., None]
  beyond = pos[None, None, :] >= lengths[None, :, None]  # after the completion mask (SPG: ~completion_mask)
  # In-block positions past the valid ones are masked too (SPG leaves is_mask_following True there).
  masked = chosen | later | beyond | (in_block & ~candidate)
  return masked, pos_block[None, None, :] < block[..., None]


@estimator("spg_block")
def spg_block_logprobs(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array,
                       *, mask_id: int, completion_mask: jax.Array | None = None,
                       spg_block: SPGBlockConfig = SPGBlockConfig(),
                       p_mask_prompt: float = EstimatorOptions.p_mask_prompt,
                       strata_batch: int = EstimatorOptions.strata_batch) -> TokenScores:
  """Log-probs of the masked completion positions of SPG's ``num_t`` block-masked contexts.

  Args:
    logits_fn: pure ``(params, tokens[B, T]) -> logits[B, T, V]`` (or a ModelFns).
    tokens: int32 [B, P+L] rollout sequences.
    prompt_len: P (static).
    key: PRNG key of the masks.
    mask_id: ``[MASK]`` id.
    completion_mask: float32 [B, L] (1 up to and including the first EOS); None: every position valid.
    spg_block: ``num_t``, ``block_length`` (> 0: the learner fills 0 with ``rollout.block_length``),
      ``min_t``, ``max_t`` (``likelihood.spg_block``).
    p_mask_prompt: SPG's ``p_mask_prompt``, applied to every position the block mask leaves clean.
    strata_batch: 0 vectorises the ``num_t`` passes; 0 < n < num_t runs n at a time (``lax.map``).
  Returns:
    :class:`~daca_jax.contracts.TokenScores` of kind ``"logprob"`` with S = ``num_t`` contexts: ``logp``
    float32 [B, num_t·L] (context-major), ``mask`` 1 on each context's masked completion positions.
    Costs ``num_t`` forward passes of batch B.
  Raises:
    ValueError: ``block_length`` does not divide L, or ``num_t`` exceeds the block count.
  """
  k_prompt, k_est = split_key(key)
  b, total = tokens.shape
  length = total - prompt_len
  comp = tokens[:, prompt_len:]
  valid = jnp.ones((b, length), jnp.float32) if completion_mask is None else completion_mask
  lengths = jnp.sum(valid > 0, axis=-1).astype(jnp.int32)
  t = spg_block.num_t
  masked, earlier = spg_block_masks(k_est, lengths, length, t, spg_block.block_length, spg_block.min_t, spg_block.max_t)
  prompt = jnp.broadcast_to(tokens[None, :, :prompt_len], (t, b, prompt_len))
  if p_mask_prompt > 0.0:  # SPG draws it per context, over every position the block mask left clean
    hit = jax.random.uniform(k_prompt, (t, b, total)) < p_mask_prompt
    prompt = jnp.where(hit[..., :prompt_len], mask_id, prompt)
    masked = masked | (earlier & hit[..., prompt_len:])
  xs = jnp.concatenate([prompt, jnp.where(masked, mask_id, comp[None])], axis=-1)  # [T, B, P+L]

  def one_pass(x: jax.Array) -> jax.Array:
    return score_targets(logits_fn, params, x, comp, prompt_len, mask_id)  # [B, L]

  if strata_batch and strata_batch < t:
    per_pass = jax.lax.map(jax.checkpoint(one_pass, prevent_cse=False), xs, batch_size=strata_batch)
  else:
    per_pass = jax.vmap(one_pass)(xs)  # [T, B, L]
  flat = lambda x: jnp.transpose(x, (1, 0, 2)).reshape(b, t * length)  # context-major [B, T·L]
  return TokenScores(logp=flat(per_pass), mask=flat(masked.astype(jnp.float32)), num_states=t)
