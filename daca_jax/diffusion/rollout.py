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

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.contracts import as_model_fns, check_integer, check_shape
from daca_jax.diffusion.decode import (SAMPLE_CHUNK_BYTES, DecodeState, ModelView, RowWindow,  # noqa: F401
                                       Trajectory, backfill_skipped, block_open, chunk_size,
                                       completion_mask_from_eos, decode_step, finish_trajectory, full_pass_view,
                                       init_state, maybe_skip, record_keys, row_window, sampling_setup,
                                       tokens_per_step)
from daca_jax.diffusion.fast import cached_rollout
from daca_jax.errors import ConfigError
from daca_jax.config.rollout import RolloutConfig


def rollout(logits_fn: Any, params: Any, prompts: jax.Array, key: jax.Array, cfg: RolloutConfig, *,
            mask_id: int, eos_id: int, record_step_conf: bool = False,
            record_step_entropy: bool = False, record_commit_hidden: bool = False,
            kv_fns: Any = None, vocab_limit: int | None = None, rows: jax.Array | None = None,
            total_rows: int = 0) -> Trajectory:
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
    mask_id: ``[MASK]`` id (never proposed).
    eos_id: end-of-sequence id (``completion_mask`` ends at the first one).
    record_step_conf: also return ``step_conf [S, B, L]`` (DPS / DTCA inputs).
    record_step_entropy: also return ``step_entropy [S, B, L]``.
    record_commit_hidden: also return ``commit_hidden [B, L, D]``; a ``logits_fn`` without the model
      split must then return ``(logits, hidden)`` (``make_logits_fn(graphdef, return_hidden=True)``).
    kv_fns: for ``cfg.kv_cache != "none"``: the model's :class:`daca_jax.models.kv_cache.KVFns`;
      None takes them from ``logits_fn`` (made by ``daca_jax.models.make_logits_fn``).
    vocab_limit: never propose ids >= this (the tokenizer's size); None: the model's
      ``ModelConfig.vocab_limit`` (0 = all ids), or all ids for a plain ``logits_fn``.
    rows: int32 [B] indices of these rows in a batch of ``total_rows`` whose random draws they take
      (a micro-batch of a larger rollout: :func:`rollout_in_micro_batches`); None: the rows are the
      whole batch.
    total_rows: the larger batch's row count (static; with ``rows``).
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
                          vocab_limit=vocab_limit, rows=rows, total_rows=total_rows)
  window = row_window(prompts, rows, total_rows)
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
                         rows=window, **opts)

    new, rec, executed = maybe_skip(run, state, blk, record_keys=keys, **opts)
    return new, (rec, executed)

  xs = (jnp.arange(steps, dtype=jnp.int32), jnp.arange(steps, dtype=jnp.int32) // cfg.steps_per_block,
        jnp.asarray(tokens_per_step(cfg)), jax.random.split(key, steps))
  hidden_like = jax.eval_shape(lambda x: view_of(x).hidden, x_init) if record_commit_hidden else None
  state, (rec, executed) = jax.lax.scan(step, init_state(prompts, cfg.gen_length, mask_id, hidden_like), xs)
  return finish_trajectory(state, rec, executed, prompt_len=p, cfg=cfg, eos_id=eos_id, mask_id=mask_id)


def micro_batch_rows(batch: int, rollout_batch: int, shards: int = 1) -> np.ndarray:
  """int32 [M, rollout_batch] the rows of each of the M = ``batch / rollout_batch`` micro-batches.

  A batch split over ``shards`` devices holds rows ``[i·B/n, (i+1)·B/n)`` on device i; micro-batch k
  takes the k-th ``rollout_batch / n`` of every device's rows, so selecting it and putting the results
  back are local to each device (in a multi-host run, to each process).

  Raises:
    ConfigError: ``rollout_batch`` does not divide ``batch`` or does not split over ``shards``.
  """
  if rollout_batch <= 0 or batch % rollout_batch:
    raise ConfigError("rl.rollout_batch", rollout_batch, f"a divisor of the {batch} rows sampled per iteration")
  if rollout_batch % shards:
    raise ConfigError("rl.rollout_batch", rollout_batch, f"a multiple of the {shards} batch shards")
  m, per = batch // rollout_batch, rollout_batch // shards
  ids = np.arange(batch, dtype=np.int32).reshape(shards, m, per)
  return np.ascontiguousarray(ids.transpose(1, 0, 2).reshape(m, rollout_batch))


# Trajectory fields whose rows are not on axis 0 (the step records [S, B, L]) or that have none.
_ROW_AXIS = {"step_conf": 1, "step_entropy": 1, "model_calls": None, "finished": None}


def rollout_in_micro_batches(rollout_fn: Any, params: Any, prompts: Any, key: jax.Array, rollout_batch: int,
                             shards: int = 1) -> Trajectory:
  """One rollout of ``prompts [B, P]`` sampled ``rollout_batch`` rows at a time: the same trajectory as
  ``rollout_fn(params, prompts, key)``, with the activations of one micro-batch at a time.

  Args:
    rollout_fn: ``(params, prompts[b, P], key, rows=int32 [b], total_rows=B) -> Trajectory``, e.g.
      :func:`make_rollout_fn` (one compilation serves every micro-batch: ``rows`` is traced).
    rollout_batch: rows per call, a divisor of B and a multiple of ``shards``.
    shards: devices the batch is split over (:func:`micro_batch_rows`).
  Returns:
    The whole batch's :class:`Trajectory`, rows in the order of ``prompts``: every row's tokens and
    records are those of the one-call rollout (each micro-batch draws its rows' noise of the whole
    batch's draw, :mod:`daca_jax.diffusion.noise`). ``model_calls`` is the largest of the calls' (with
    threshold decoding each micro-batch skips the steps its own rows have finished), ``finished`` all
    of theirs.
  Raises:
    ConfigError: see :func:`micro_batch_rows`.
  """
  b = prompts.shape[0]
  ids = micro_batch_rows(b, rollout_batch, shards)
  m = ids.shape[0]
  prompts = jnp.asarray(prompts)
  parts = [rollout_fn(params, _take_micro_batch(prompts, k, m, shards), key, rows=jnp.asarray(ids[k]),
                      total_rows=b) for k in range(m)]
  return _merge_micro_batches(parts, shards)


def micro_batched(rollout_fn: Any, rollout_batch: int, shards: int = 1) -> Any:
  """``rollout_fn`` as ``fn(params, prompts[B, P], key) -> Trajectory`` sampling ``rollout_batch`` rows per
  call (:func:`rollout_in_micro_batches`). ``fn.lower(params, prompts, key)`` lowers one micro-batch's
  sampler (``rollout_batch`` rows of ``prompts``: the program whose memory a step needs; its
  ``out_info`` is a micro-batch's trajectory) for abstract arguments."""

  def fn(params: Any, prompts: Any, key: jax.Array) -> Trajectory:
    return rollout_in_micro_batches(rollout_fn, params, prompts, key, rollout_batch, shards)

  def lower(params: Any, prompts: Any, key: Any) -> Any:
    b = prompts.shape[0]
    micro_batch_rows(b, rollout_batch, shards)  # the same ConfigError as a call
    part = jax.ShapeDtypeStruct((rollout_batch, *prompts.shape[1:]), prompts.dtype)
    rows = jax.ShapeDtypeStruct((rollout_batch,), jnp.int32)
    return rollout_fn.lower(params, part, key, rows=rows, total_rows=b)

  fn.lower = lower
  fn.rollout_batch = rollout_batch
  return fn


def whole_batch_struct(traj: Trajectory, batch: int) -> Trajectory:
  """The abstract trajectory (``jax.ShapeDtypeStruct`` leaves) of a whole batch of ``batch`` rows from
  one micro-batch's (e.g. the ``out_info`` of :func:`micro_batched`'s ``lower``: memory planning)."""

  def grow(name, x):
    axis = _ROW_AXIS.get(name, 0)
    if x is None or axis is None:
      return x
    return jax.ShapeDtypeStruct((*x.shape[:axis], batch, *x.shape[axis + 1:]), x.dtype)

  return traj.replace(**{f.name: grow(f.name, getattr(traj, f.name))
                         for f in dataclasses.fields(Trajectory) if not f.metadata.get("static")})


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _take_micro_batch(x: jax.Array, k: int, m: int, n: int) -> jax.Array:
  return x.reshape(n, m, -1, *x.shape[1:])[:, k].reshape(-1, *x.shape[1:])


@functools.partial(jax.jit, static_argnums=(1,))
def _merge_micro_batches(parts: list[Trajectory], shards: int) -> Trajectory:
  """The inverse of the micro-batch selection of :func:`rollout_in_micro_batches`."""
  m = len(parts)

  def merge(name, *xs):
    if xs[0] is None:
      return None
    axis = _ROW_AXIS.get(name, 0)
    if axis is None:
      return jnp.all(jnp.stack(xs)) if name == "finished" else jnp.max(jnp.stack(xs))
    x = jnp.stack(xs, axis=axis)  # [..., M, b, ...]
    shape = x.shape
    x = x.reshape(*shape[:axis], m, shards, shape[axis + 1] // shards, *shape[axis + 2:])
    x = jnp.swapaxes(x, axis, axis + 1)  # [..., n, M, b/n, ...]
    return x.reshape(*shape[:axis], m * shape[axis + 1], *shape[axis + 2:])

  fields = {f.name: merge(f.name, *(getattr(t, f.name) for t in parts))
            for f in dataclasses.fields(Trajectory) if not f.metadata.get("static")}
  return parts[0].replace(**fields)


def make_rollout_fn(logits_fn: Any, cfg: RolloutConfig, *, mask_id: int, eos_id: int,
                    record_step_conf: bool = False, record_step_entropy: bool = False,
                    record_commit_hidden: bool = False, kv_fns: Any = None,
                    vocab_limit: int | None = None):
  """Returns ``jit(rollout)`` as ``fn(params, prompts[B, P], key, rows=None, total_rows=0) ->
  Trajectory`` (``rows`` / ``total_rows``: a micro-batch of a larger rollout,
  :func:`rollout_in_micro_batches`).

  Args:
    logits_fn: pure ``(params, tokens[B, T] int32) -> logits[B, T, V]`` or a
      :class:`~daca_jax.contracts.ModelFns` (see :func:`rollout`).
    cfg: the sampler's geometry and options (static).
    mask_id: ``[MASK]`` id (never proposed).
    eos_id: end-of-sequence id.
    record_step_conf, record_step_entropy, record_commit_hidden: the trajectory records to produce
      (``step_conf`` / ``step_entropy`` float32 [S, B, L], ``commit_hidden`` [B, L, D]).
    kv_fns: the model's K/V-cache functions for ``cfg.kv_cache`` (default: from ``logits_fn``'s graph).
    vocab_limit: ids at or above it are never proposed (default: the model's ``vocab_limit``).

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
                                   vocab_limit=vocab_limit), static_argnames=("total_rows",))
