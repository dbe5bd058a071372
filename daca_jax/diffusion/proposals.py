"""Which token ids the sampler may propose, and the invariants of a finished rollout.

LLaDA's ``generate`` takes the argmax over the whole output vocabulary, so a model that puts mass on
``[MASK]`` can "commit" the mask itself: the position stays masked, its ``commit_step`` stays -1 and
the credit / likelihood code downstream reads a half-decoded sequence. Checkpoints also pad their
embedding tables beyond the tokenizer (Dream-7B: 152064 rows for a 151667-id tokenizer, LLaDA-8B:
126464), and ids past the tokenizer decode to nothing (Dream issue #54). The proposable set is therefore
``[0, vocab_limit)`` without the mask id; the sampler restricts the logits to it before the Gumbel
argmax, so it samples the model's distribution conditioned on the set (Dream filters its top-p /
top-k logits the same way before the softmax its confidences come from).
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.errors import ConfigError


def proposable_ids(vocab_size: int, mask_id: int, vocab_limit: int = 0) -> np.ndarray:
  """bool [vocab_size]: True for the ids the sampler may commit.

  Args:
    vocab_size: V of the logits.
    mask_id: the ``[MASK]`` id (never proposable).
    vocab_limit: ids at or above it are never proposed (the tokenizer's size); 0 means V.
  Raises:
    ConfigError: ``mask_id`` or ``vocab_limit`` outside the vocabulary, or no id left to propose.
  """
  limit = vocab_limit or vocab_size
  if not 0 <= mask_id < vocab_size:
    raise ConfigError("mask_id", mask_id, f"an id in [0, {vocab_size}) (the logits' vocabulary)")
  if not 1 <= limit <= vocab_size:
    raise ConfigError("model.vocab_limit", vocab_limit, f"0 or in [1, {vocab_size}] (the logits' vocabulary)")
  ok = np.arange(vocab_size) < limit
  ok[mask_id] = False
  if not ok.any():
    raise ConfigError("model.vocab_limit", vocab_limit, f"a limit that leaves an id besides mask_id={mask_id}")
  return ok


def restrict(logits: jax.Array, ok: np.ndarray) -> jax.Array:
  """``logits [..., V]`` with the ids outside ``ok`` set to -inf (float32)."""
  return jnp.where(jnp.asarray(ok), logits.astype(jnp.float32), -jnp.inf)


def safe_argmax(scores: jax.Array, ok: np.ndarray) -> jax.Array:
  """int32 argmax over the last axis that is always a proposable id (the first proposable one when
  every proposable score is -inf, where a plain argmax would return id 0)."""
  x0 = jnp.argmax(scores, axis=-1).astype(jnp.int32)
  return jnp.where(jnp.asarray(ok)[x0], x0, jnp.int32(int(np.argmax(ok))))


def check_schedule(tokens_per_step: np.ndarray, steps_per_block: int, block_length: int) -> None:
  """Trace-time check that the schedule commits every position of every block exactly once.

  With the mask id never proposed (:func:`safe_argmax`) and every still-masked in-block position
  eligible, this makes a rollout finish with no ``[MASK]`` and no ``commit_step == -1``.
  """
  per_block = np.asarray(tokens_per_step).reshape(-1, steps_per_block).sum(axis=1)
  if not (per_block == block_length).all():
    raise AssertionError(f"rollout schedule commits {per_block.tolist()} tokens per block, "
                         f"not block_length={block_length}")


def finished(completion: jax.Array, commit_step: jax.Array, mask_id: int) -> jax.Array:
  """bool []: no ``[MASK]`` left in ``completion [B, L]`` and every ``commit_step [B, L]`` >= 0."""
  return jnp.all(completion != mask_id) & jnp.all(commit_step >= 0)


def assert_finished(traj: Any) -> None:
  """Raises when a :class:`~daca_jax.diffusion.rollout.Trajectory` is not fully decoded.

  Call it where the host reads the rollout anyway (decoding, logging): it syncs on one scalar.

  Raises:
    RuntimeError: ``traj.finished`` is False (names the count of masked / uncommitted positions).
  """
  if traj.finished is None or bool(traj.finished):
    return
  comp, commit = np.asarray(traj.completion), np.asarray(traj.commit_step)
  raise RuntimeError(f"rollout not finished: {int((commit < 0).sum())} positions never committed, "
                     f"{int((comp == traj.mask_id).sum())} still [MASK] (id {traj.mask_id})")
