"""The decode loop's pieces, shared by the plain sampler (:mod:`daca_jax.diffusion.rollout`) and the
K/V-cached one (:mod:`daca_jax.diffusion.fast`): the :class:`Trajectory` a rollout returns, LLaDA's
commit schedule, the decode state, one remasking step, block skipping and the trajectory records.

Behaviour, PRNG use and memory layout are described in :mod:`daca_jax.diffusion.rollout`.

Why one module over 350 lines: its pieces are the one decode loop that two samplers share (the state, the
step, block skipping and the records change together), so they stay in one place.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.contracts import (Trajectory, as_model_fns, call_hidden, call_logits,  # noqa: F401
                                check_integer, check_shape)  # (Trajectory re-exported)
from daca_jax.diffusion import proposals
from daca_jax.diffusion.noise import gumbel_window
from daca_jax.diffusion.remasking import REMASKING
from daca_jax.errors import ConfigError
from daca_jax.config.rollout import RolloutConfig

# Budget of one chunk's float32 logits [B, chunk, V]: at LLaDA-8B width and B = 64 a position costs
# 32 MiB, so chunks of 8 positions; a tiny model projects a whole block at once.
SAMPLE_CHUNK_BYTES = 256 * 2**20


def tokens_per_step(cfg: RolloutConfig) -> np.ndarray:
  """LLaDA's schedule: tokens committed at each of the S steps (int32 [S]); sums to L."""
  spb = cfg.steps_per_block
  base, rem = divmod(cfg.block_length, spb)
  per_block = np.full((spb,), base, np.int32)
  per_block[:rem] += 1
  return np.tile(per_block, cfg.num_blocks)


def completion_mask_from_eos(completion: jax.Array, eos_id: int) -> jax.Array:
  """float32 [B, L]: 1 up to and including the first ``eos_id``; 0 after. All ones without EOS."""
  is_eos = completion == eos_id
  length = completion.shape[-1]
  first = jnp.where(jnp.any(is_eos, -1), jnp.argmax(is_eos, -1), length)
  return (jnp.arange(length)[None, :] <= first[:, None]).astype(jnp.float32)


def _stable_rank_desc(score: jax.Array) -> jax.Array:
  """Rank of each entry when sorted descending; ties go to the lower index. int32 [B, L]."""
  order = jnp.argsort(-score, axis=-1, stable=True)
  return jnp.argsort(order, axis=-1, stable=True)


class DecodeState(NamedTuple):
  """Carry of the sampler loop.

  x: int32 [B, P+L] current sequence; commit_step: int32 [B, L] (-1 while masked); commit_conf:
  float32 [B, L]; conf / ent: float32 [B, L] latest top-1 probability / entropy seen at each
  completion position (what a K/V-cached step does not recompute keeps its last value);
  hidden: [B, L, D] final hidden state at the commit step, or None when not recorded.
  """

  x: jax.Array
  commit_step: jax.Array
  commit_conf: jax.Array
  conf: jax.Array
  ent: jax.Array
  hidden: jax.Array | None = None


class RowWindow(NamedTuple):
  """Where a rollout's B rows sit in a larger batch whose random draws they take (a rollout sampled in
  micro-batches, ``rl.rollout_batch``).

  ids: int32 [B] the rows' indices in the larger batch (traced: one compiled sampler serves every
  micro-batch), or None when the rows are the whole batch; total: the larger batch's row count
  (static; 0 with ``ids`` None).
  """

  ids: jax.Array | None = None
  total: int = 0


class ModelView(NamedTuple):
  """What one model pass gives the sampler for the completion positions ``[lo, lo + W)``.

  rows: final hidden states [B, W, D] when ``head`` is set, else float logits [B, W, V].
  head: ``hidden [B, C, D] -> logits float32 [B, C, V]`` (the output projection), or None.
  hidden: [B, W, D] states recorded as ``commit_hidden``, or None.
  """

  rows: jax.Array
  head: Any = None
  hidden: jax.Array | None = None

  def logits(self, start: Any, size: int) -> jax.Array:
    """float32 [B, size, V] logits of window positions ``start .. start+size-1`` (start may be traced)."""
    rows = jax.lax.dynamic_slice_in_dim(self.rows, start, size, axis=1)
    return (rows if self.head is None else self.head(rows)).astype(jnp.float32)


def init_state(prompts: jax.Array, length: int, mask_id: int,
               hidden_like: jax.ShapeDtypeStruct | None = None) -> DecodeState:
  """All-masked completion after ``prompts [B, P]``; ``hidden_like`` ([..., D]) enables commit_hidden."""
  b = prompts.shape[0]
  x = jnp.concatenate([prompts.astype(jnp.int32), jnp.full((b, length), mask_id, jnp.int32)], axis=1)
  zeros = jnp.zeros((b, length), jnp.float32)
  hidden = None
  if hidden_like is not None:
    hidden = jnp.zeros((b, length, hidden_like.shape[-1]), hidden_like.dtype)
  return DecodeState(x, jnp.full((b, length), -1, jnp.int32), zeros, zeros, zeros, hidden)


def chunk_size(block_length: int, batch: int, vocab: int) -> int:
  """Completion positions projected at once: the largest divisor of ``block_length`` whose float32
  logits ``[batch, c, vocab]`` fit :data:`SAMPLE_CHUNK_BYTES` (at least 1). A divisor, so that a chunk
  lies wholly inside or outside the current block."""
  fits = max(1, SAMPLE_CHUNK_BYTES // (4 * batch * vocab))
  return max(c for c in range(1, min(block_length, fits) + 1) if block_length % c == 0)


def _window_stats(view: ModelView, ok: np.ndarray, k_gumbel: jax.Array, blk: jax.Array, *, lo: int,
                  length: int, cfg: RolloutConfig, record_conf: bool, record_entropy: bool,
                  rows: RowWindow) -> dict[str, jax.Array]:
  """The current block's candidates and the window's records, chunk by chunk.

  Returns {"x0": int32 [B, bl], "cand": float32 [B, bl]} for block ``blk`` (its candidate and that
  candidate's probability) and, when recorded, {"conf"/"entropy": float32 [B, W]} for the whole window.
  The Gumbel noise of a chunk is that chunk's slice of the full [B, L, V] draw (of the whole batch's
  ``rows.total`` rows, at ``rows.ids``, for a micro-batch). Without records only
  the block's chunks are projected through the output head (a pass over the whole window would
  project ``W / bl`` times as many positions for nothing: 8x at d1's L 256, block 32).
  """
  b, w = view.rows.shape[:2]
  bl = cfg.block_length
  c = chunk_size(bl, b, ok.shape[0])
  rel = blk * bl - lo  # the block's first position in the window (traced in a full pass)

  def normalised(start):
    logits = proposals.restrict(view.logits(start, c), ok)  # [B, c, V]
    return logits, jax.nn.logsumexp(logits, axis=-1)

  def candidates(logits, logz, start):
    if cfg.temperature > 0:
      noise = gumbel_window(k_gumbel, (rows.total or b, length, logits.shape[-1]), lo + start, c, rows.ids)
      x0 = proposals.safe_argmax(logits + cfg.temperature * noise, ok)
    else:
      x0 = proposals.safe_argmax(logits, ok)
    return x0, jnp.exp(jnp.take_along_axis(logits, x0[..., None], -1)[..., 0] - logz)

  def stack(one, n, width):
    if n == 1:
      return one(jnp.int32(0))
    per_chunk = jax.lax.map(one, jnp.arange(n, dtype=jnp.int32))  # {name: [n, B, c]}
    return {name: jnp.moveaxis(v, 0, 1).reshape(b, width) for name, v in per_chunk.items()}

  if not (record_conf or record_entropy):
    def block_chunk(j):
      logits, logz = normalised(rel + j * c)
      x0, cand = candidates(logits, logz, rel + j * c)
      return {"x0": x0, "cand": cand}

    return stack(block_chunk, bl // c, bl)

  def window_chunk(j):
    start = j * c
    logits, logz = normalised(start)
    out = {}
    if record_conf:
      out["conf"] = jnp.exp(jnp.max(logits, axis=-1) - logz)
    if record_entropy:
      logq = logits - logz[..., None]
      out["entropy"] = -jnp.sum(jnp.where(logq > -jnp.inf, jnp.exp(logq) * logq, 0.0), axis=-1)
    nothing = lambda *_: (jnp.zeros((b, c), jnp.int32), jnp.zeros((b, c), jnp.float32))
    in_block = (lo + start) // bl == blk  # a chunk is wholly inside or outside it
    out["x0"], out["cand"] = jax.lax.cond(in_block, candidates, nothing, logits, logz, start)
    return out

  out = stack(window_chunk, w // c, w)
  for name in ("x0", "cand"):
    out[name] = jax.lax.dynamic_slice_in_dim(out[name], rel, bl, axis=1)
  return out


def decode_step(view: ModelView, state: DecodeState, s: jax.Array, blk: jax.Array, k: jax.Array,
                step_key: jax.Array, *, lo: int, prompt_len: int, cfg: RolloutConfig, mask_id: int,
                ok: np.ndarray, record_step_conf: bool, record_step_entropy: bool,
                rows: RowWindow | None = None) -> tuple[DecodeState, dict]:
  """One remasking step from the model's view of the completion positions ``[lo, lo+W)``.

  Args:
    view: the pass's hidden states (or logits) of the window (W = L for a full pass); the current
      block must lie in the window.
    state: the carry; s: global step index; blk: its block; k: tokens the schedule commits.
    step_key: this step's key (split as in the module docstring).
    ok: bool [V] proposable ids (:func:`daca_jax.diffusion.proposals.proposable_ids`).
    rows: where these B rows sit in the batch whose draws they take (:class:`RowWindow`); None:
      they are the whole batch.
  Returns:
    (new state, records {"conf"/"entropy": float32 [B, L], 0 where already committed}).
  """
  x, commit_step, commit_conf, conf, ent, commit_hidden = state
  b, length = commit_step.shape
  bl = cfg.block_length
  w = view.rows.shape[1]
  rows = RowWindow() if rows is None else rows
  k_gumbel, k_remask = jax.random.split(step_key)
  comp = x[:, prompt_len:]
  masked_all = comp == mask_id  # [B, L]
  stats = _window_stats(view, ok, k_gumbel, blk, lo=lo, length=length, cfg=cfg,
                        record_conf=record_step_conf, record_entropy=record_step_entropy, rows=rows)
  b0 = blk * bl  # the block's first completion position (traced in a full pass)
  rel = b0 - lo
  x0, cand_prob = stats["x0"], stats["cand"]  # [B, bl]
  # The random rule draws at [B, L] (B of the whole batch): place the block in full rows, and these rows
  # at their places in the whole batch, so that it gets the same draw.
  full = jax.lax.dynamic_update_slice_in_dim(jnp.zeros((b, length), jnp.float32), cand_prob, b0, axis=1)
  if rows.ids is not None:
    full = jnp.zeros((rows.total, length), jnp.float32).at[rows.ids].set(full)
  score = REMASKING.get(cfg.remasking)(full, k_remask)
  score = jax.lax.dynamic_slice_in_dim(score if rows.ids is None else score[rows.ids], b0, bl, axis=1)
  eligible = jax.lax.dynamic_slice_in_dim(masked_all, b0, bl, axis=1)
  # Every still-masked in-block position is eligible with a finite score (NaN logits included), so
  # the schedule's k per step commit each block completely.
  score = jnp.where(eligible, jnp.where(jnp.isnan(score) | (score == -jnp.inf), -1.0, score), -jnp.inf)
  chosen = _stable_rank_desc(score) < k
  if cfg.threshold > 0:
    chosen |= cand_prob > cfg.threshold
  commit = eligible & chosen

  def put(arr, new, axis=1, at=b0):
    return jax.lax.dynamic_update_slice_in_dim(arr, new, at, axis=axis)

  def block_of(arr):
    return jax.lax.dynamic_slice_in_dim(arr, b0, bl, axis=1)

  cur = jax.lax.dynamic_slice_in_dim(x, prompt_len + b0, bl, axis=1)
  x = put(x, jnp.where(commit, x0, cur), at=prompt_len + b0)
  commit_step = put(commit_step, jnp.where(commit, s, block_of(commit_step)))
  commit_conf = put(commit_conf, jnp.where(commit, cand_prob, block_of(commit_conf)))
  if commit_hidden is not None:
    h = jax.lax.dynamic_slice_in_dim(view.hidden, rel, bl, axis=1).astype(commit_hidden.dtype)
    commit_hidden = put(commit_hidden, jnp.where(commit[..., None], h, block_of(commit_hidden)))
  out = {}
  if record_step_conf:
    conf = conf.at[:, lo:lo + w].set(stats["conf"])
    out["conf"] = jnp.where(masked_all, conf, 0.0)
  if record_step_entropy:
    ent = ent.at[:, lo:lo + w].set(stats["entropy"])
    out["entropy"] = jnp.where(masked_all, ent, 0.0)
  return DecodeState(x, commit_step, commit_conf, conf, ent, commit_hidden), out


def block_open(state: DecodeState, blk: jax.Array, *, prompt_len: int, block_length: int,
               mask_id: int) -> jax.Array:
  """bool []: some sequence still has a masked position in block ``blk``."""
  comp = state.x[:, prompt_len:]
  pos = jnp.arange(comp.shape[1], dtype=jnp.int32)[None, :]
  in_block = (pos >= blk * block_length) & (pos < (blk + 1) * block_length)
  return jnp.any((comp == mask_id) & in_block)


def maybe_skip(run: Any, state: DecodeState, blk: jax.Array, *, prompt_len: int, cfg: RolloutConfig,
               mask_id: int, record_keys: tuple[str, ...]) -> tuple[DecodeState, dict, jax.Array]:
  """``run(state) -> (state, records)`` with threshold decoding's early exit.

  Without a threshold every step runs. With one, a step whose block every sequence has finished is
  skipped (no model call; nothing would be committed). Returns (state, records, executed int32 [])."""
  if cfg.threshold <= 0:
    new, rec = run(state)
    return new, rec, jnp.ones((), jnp.int32)

  def skip(st):
    zeros = jnp.zeros(st.commit_step.shape, jnp.float32)
    return st, {name: zeros for name in record_keys}, jnp.zeros((), jnp.int32)

  def go(st):
    new, rec = run(st)
    return new, rec, jnp.ones((), jnp.int32)

  is_open = block_open(state, blk, prompt_len=prompt_len, block_length=cfg.block_length, mask_id=mask_id)
  return jax.lax.cond(is_open, go, skip, state)


def backfill_skipped(records: jax.Array, executed: jax.Array) -> jax.Array:
  """Replaces the [S, B, L] record of each skipped step by the next executed step's (zeros if none).

  Nothing is committed between a skipped step and the next executed one, so that is the record the
  model would have produced at the skipped step (the trajectory's layout stays exact for DPS / DTCA)."""

  def fill(nxt, row_ex):
    row, ex = row_ex
    row = jnp.where(ex > 0, row, nxt)
    return row, row

  _, filled = jax.lax.scan(fill, jnp.zeros_like(records[0]), (records, executed), reverse=True)
  return filled


def finish_trajectory(state: DecodeState, rec: dict, executed: jax.Array, *, prompt_len: int,
                      cfg: RolloutConfig, eos_id: int, mask_id: int) -> Trajectory:
  """Packs the loop's final state and stacked records ([S, B, L]) into a :class:`Trajectory`."""
  if cfg.threshold > 0:
    rec = {name: backfill_skipped(r, executed) for name, r in rec.items()}
  comp = state.x[:, prompt_len:]
  return Trajectory(
      tokens=state.x,
      completion_mask=completion_mask_from_eos(comp, eos_id),
      commit_step=state.commit_step,
      commit_conf=state.commit_conf,
      step_conf=rec.get("conf"),
      step_entropy=rec.get("entropy"),
      commit_hidden=state.hidden,
      prompt_len=prompt_len,
      num_model_calls=cfg.steps,
      model_calls=jnp.sum(executed).astype(jnp.int32),
      finished=proposals.finished(comp, state.commit_step, mask_id),
      mask_id=mask_id,
  )


def row_window(prompts: jax.Array, rows: jax.Array | None, total_rows: int) -> RowWindow:
  """The :class:`RowWindow` of a rollout's ``rows`` (trace-time checks).

  Raises:
    ShapeError: ``rows`` is not an integer ``[B]`` array for ``prompts [B, P]``.
    ConfigError: ``total_rows`` is smaller than B.
  """
  if rows is None:
    return RowWindow()
  check_shape("rows", rows, (prompts.shape[0],), "[B]: each prompt row's index in the whole batch")
  check_integer("rows", rows)
  if total_rows < prompts.shape[0]:
    raise ConfigError("total_rows", total_rows, f">= the {prompts.shape[0]} rows of this micro-batch")
  return RowWindow(jnp.asarray(rows, jnp.int32), total_rows)


def record_keys(record_step_conf: bool, record_step_entropy: bool) -> tuple[str, ...]:
  return (("conf",) if record_step_conf else ()) + (("entropy",) if record_step_entropy else ())


def sampling_setup(logits_fn: Any, params: Any, vocab_size: int, cfg: RolloutConfig, mask_id: int,
                   vocab_limit: int | None) -> np.ndarray:
  """Trace-time checks and the proposable ids (bool [V]) of a rollout.

  ``vocab_limit`` None takes the model's (``ModelFns.config(params).vocab_limit``, from
  ``daca_jax.models.make_logits_fn``), else all of V. A model-backed ``logits_fn`` must use
  ``mask_id`` as its ``mask_token_id``.

  Raises:
    ConfigError: ``mask_id`` differs from the model's mask id, or the limit / mask id do not fit V.
  """
  model_cfg = as_model_fns(logits_fn).model_config(params)
  if model_cfg is not None and model_cfg.mask_token_id != mask_id:
    raise ConfigError("mask_id", mask_id, f"the model's mask_token_id={model_cfg.mask_token_id}")
  if vocab_limit is None:
    vocab_limit = model_cfg.vocab_limit if model_cfg is not None else 0
  proposals.check_schedule(tokens_per_step(cfg), cfg.steps_per_block, cfg.block_length)
  return proposals.proposable_ids(vocab_size, mask_id, vocab_limit)


def full_pass_view(logits_fn: Any, params: Any, x: jax.Array, prompt_len: int,
                   record_commit_hidden: bool) -> ModelView:
  """The :class:`ModelView` of one full pass over ``x [B, P+L]``: the final hidden states of the
  completion and the output head when ``logits_fn`` is a :class:`~daca_jax.contracts.ModelFns` with
  the model split (``hidden`` / ``head``), else its logits (and ``(logits, hidden)`` when
  ``record_commit_hidden``).

  Raises:
    ShapeError: the logits (or hidden states) are not one row per position of ``x``, e.g. a
      ``logits_fn`` returning the completion's ``[B, L, V]`` for a ``[B, P+L]`` input, which would
      decode the wrong positions and leave ``[MASK]`` behind.
  """
  fns = as_model_fns(logits_fn)
  if fns.has_split:
    h = call_hidden(fns, params, x)[:, prompt_len:]
    return ModelView(h, lambda rows: fns.head(params, rows), h)
  logits, hidden = call_logits(fns, params, x, returns_hidden=record_commit_hidden)
  return ModelView(logits[:, prompt_len:], None, None if hidden is None else hidden[:, prompt_len:])
