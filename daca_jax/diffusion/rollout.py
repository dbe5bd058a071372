"""Rollout sampler for masked diffusion LMs: LLaDA's semi-autoregressive remasking loop, jit-compiled.

Behaviour matched: LLaDA ``generate.py`` (Nie et al. 2025). The completion starts fully masked and is
split into ``gen_length / block_length`` blocks decoded left to right; each block gets
``steps / num_blocks`` steps and commits ``block_length // steps_per_block`` tokens per step, the
remainder spread one each over the first steps. At every step the model sees the current sequence,
proposes a candidate ``x0 = argmax(logits + temperature * Gumbel)`` at every position, scores the
candidates with the remasking rule, and commits the top-k still-masked positions of the current block.

The loop is one ``lax.scan`` over all S steps (block index and tokens-per-step are scanned inputs), so
shapes are static and the model is called exactly S times. The records that credit assigners need
(per-step top-1 confidence / entropy) are read off the logits the loop already has: recording them
changes neither the number of model calls nor the sampled tokens.

PRNG use (so that reference implementations can reproduce it): ``step_keys = split(key, S)``; at step s,
``k_gumbel, k_remask = split(step_keys[s])``; Gumbel noise ``jax.random.gumbel(k_gumbel, [B, L, V],
float32)``; the "random" rule draws ``uniform(k_remask, [B, L])``. Ties in the score are broken
towards the lower position (stable sort).

Proposals (:mod:`daca_jax.diffusion.proposals`): the candidates are drawn from the model's distribution
restricted to the proposable ids — never ``[MASK]``, never an id at or above the model's
``vocab_limit`` (the tokenizer's size) — and the confidences / entropies are those of the restricted
distribution. Together with the schedule (checked at trace time) every position is committed exactly
once; ``Trajectory.finished`` records it on the device.

Memory: the model's final hidden states are projected to logits a chunk of completion positions at a
time (:func:`chunk_size`: float32 ``[B, chunk, V]`` within ``SAMPLE_CHUNK_BYTES``; never the prompt's,
never the whole canvas at once), and Gumbel noise is drawn only for the
chunks of the current block, at exactly the values of the full ``[B, L, V]`` draw
(:func:`daca_jax.diffusion.noise.gumbel_window`), so the tokens for a given key are unchanged. A
``logits_fn`` without the model split (:class:`~daca_jax.contracts.ModelFns` ``hidden`` / ``head``) is
read chunk by chunk from its full logits.

Fast options (``RolloutConfig.threshold`` / ``kv_cache``, off by default; Fast-dLLM, Wu et al. 2025):
threshold decoding also commits every in-block candidate whose probability exceeds the threshold and
skips (``lax.cond``, no model call) the remaining steps of a block once every sequence has finished it;
the K/V cache path lives in :mod:`daca_jax.diffusion.fast`; the loop's pieces shared by both in
:mod:`daca_jax.diffusion.decode`. Step records keep the static [S, B, L]
layout: a skipped step's record is the one the model would have produced there, i.e. that of the next
executed step (the sequence is unchanged in between), or zeros after the last one.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from daca_jax.contracts import as_model_fns, check_integer, check_shape
from daca_jax.diffusion.decode import (SAMPLE_CHUNK_BYTES, DecodeState, ModelView, Trajectory,  # noqa: F401
                                       backfill_skipped, block_open, chunk_size, completion_mask_from_eos,
                                       decode_step, finish_trajectory, full_pass_view, init_state, maybe_skip,
                                       record_keys, sampling_setup, tokens_per_step)
from daca_jax.diffusion.fast import cached_rollout
from daca_jax.types import RolloutConfig


def rollout(logits_fn: Any, params: Any, prompts: jax.Array, key: jax.Array, cfg: RolloutConfig, *,
            mask_id: int, eos_id: int, record_step_conf: bool = False,
            record_step_entropy: bool = False, record_commit_hidden: bool = False,
            kv_fns: Any = None, vocab_limit: int | None = None) -> Trajectory:
  """Samples completions for ``prompts`` (jit this, or call :func:`make_rollout_fn`).

  Args:
    logits_fn: pure ``(params, tokens[B, T] int32) -> logits[B, T, V]``, or a
      :class:`~daca_jax.contracts.ModelFns`; one made by ``daca_jax.models.make_logits_fn`` is
      projected chunk by chunk through its ``hidden`` / ``head`` split and supplies the model's
      ``vocab_limit``.
    params: model parameters.
    prompts: int32 [B, P] prompt tokens (never masked, never changed).
    key: PRNG key.
    cfg: sampler geometry (static).
    mask_id: ``[MASK]`` id (never proposed); eos_id: end-of-sequence id.
    record_step_conf: also return ``step_conf [S, B, L]`` (DPS / DTCA inputs).
    record_step_entropy: also return ``step_entropy [S, B, L]``.
    record_commit_hidden: also return ``commit_hidden [B, L, D]``; a ``logits_fn`` without the model
      split must then return ``(logits, hidden)`` (``make_logits_fn(graphdef, return_hidden=True)``).
    kv_fns: for ``cfg.kv_cache != "none"``: the model's :class:`daca_jax.models.kv_cache.KVFns`;
      None takes them from ``logits_fn`` (made by ``daca_jax.models.make_logits_fn``).
    vocab_limit: never propose ids >= this (the tokenizer's size); None: the model's
      ``ModelConfig.vocab_limit`` (0 = all ids), or all ids for a plain ``logits_fn``.
  Returns:
    A :class:`Trajectory` (``finished`` True: no ``[MASK]`` left, every position committed once).
  Raises:
    ConfigError: a bad geometry, a mask id other than the model's, a bad ``vocab_limit``, or a K/V
      cache requested for a logits_fn without a model graph.
    ShapeError: ``prompts`` not an integer ``[B, P]`` array, or the model's logits not one row per
      position of its ``[B, P+L]`` input.
  """
  cfg.validate()  # trace time only: a bad geometry is a clear ConfigError, never a silent half-decode
  check_shape("prompts", prompts, ("B", "P"), "[B, P] prompt token ids")
  check_integer("prompts", prompts)
  logits_fn = as_model_fns(logits_fn)
  if cfg.kv_cache != "none":
    return cached_rollout(logits_fn, params, prompts, key, cfg, mask_id=mask_id, eos_id=eos_id,
                          record_step_conf=record_step_conf, record_step_entropy=record_step_entropy,
                          record_commit_hidden=record_commit_hidden, kv_fns=kv_fns,
                          vocab_limit=vocab_limit)
  p = prompts.shape[1]
  steps = cfg.steps
  keys = record_keys(record_step_conf, record_step_entropy)
  opts = dict(prompt_len=p, cfg=cfg, mask_id=mask_id)
  x_init = init_state(prompts, cfg.gen_length, mask_id).x
  view_of = lambda x: full_pass_view(logits_fn, params, x, p, record_commit_hidden)
  vocab = jax.eval_shape(lambda x: view_of(x).logits(0, 1), x_init).shape[-1]
  ok = sampling_setup(logits_fn, params, vocab, cfg, mask_id, vocab_limit)

  def step(state, inputs):
    s, blk, k, step_key = inputs

    def run(st):
      return decode_step(view_of(st.x), st, s, blk, k, step_key, lo=0, ok=ok,
                         record_step_conf=record_step_conf, record_step_entropy=record_step_entropy,
                         **opts)

    new, rec, executed = maybe_skip(run, state, blk, record_keys=keys, **opts)
    return new, (rec, executed)

  xs = (jnp.arange(steps, dtype=jnp.int32), jnp.arange(steps, dtype=jnp.int32) // cfg.steps_per_block,
        jnp.asarray(tokens_per_step(cfg)), jax.random.split(key, steps))
  hidden_like = jax.eval_shape(lambda x: view_of(x).hidden, x_init) if record_commit_hidden else None
  state, (rec, executed) = jax.lax.scan(step, init_state(prompts, cfg.gen_length, mask_id, hidden_like), xs)
  return finish_trajectory(state, rec, executed, prompt_len=p, cfg=cfg, eos_id=eos_id, mask_id=mask_id)


def make_rollout_fn(logits_fn: Any, cfg: RolloutConfig, *, mask_id: int, eos_id: int,
                    record_step_conf: bool = False, record_step_entropy: bool = False,
                    record_commit_hidden: bool = False, kv_fns: Any = None,
                    vocab_limit: int | None = None):
  """Returns ``jit(rollout)`` as ``fn(params, prompts[B, P], key) -> Trajectory``.

  Raises:
    ConfigError: a bad geometry, or ``logits_fn`` neither a callable nor a ModelFns (at once); the
      checks of :func:`rollout` at the first call.
  """
  cfg.validate()
  logits_fn = as_model_fns(logits_fn)
  return jax.jit(functools.partial(rollout, logits_fn, cfg=cfg, mask_id=mask_id, eos_id=eos_id,
                                   record_step_conf=record_step_conf,
                                   record_step_entropy=record_step_entropy,
                                   record_commit_hidden=record_commit_hidden, kv_fns=kv_fns,
                                   vocab_limit=vocab_limit))
