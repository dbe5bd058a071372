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

Fast options (``RolloutConfig.threshold`` / ``kv_cache``, off by default; Fast-dLLM, Wu et al. 2025):
threshold decoding also commits every in-block candidate whose probability exceeds the threshold and
skips (``lax.cond``, no model call) the remaining steps of a block once every sequence has finished it;
the K/V cache path lives in :mod:`daca_jax.diffusion.fast`. Step records keep the static [S, B, L]
layout: a skipped step's record is the one the model would have produced there, i.e. that of the next
executed step (the sequence is unchanged in between), or zeros after the last one.
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.diffusion.remasking import REMASKING
from daca_jax.types import RolloutConfig


@flax.struct.dataclass
class Trajectory:
  """What a rollout returns (DESIGN §3).

  Attributes:
    tokens: int32 [B, P+L] final sequences (prompt then completion).
    completion_mask: float32 [B, L]: 1 up to and including the first EOS, 0 after (all 1 if no EOS).
    commit_step: int32 [B, L] global step (0..S-1) at which each completion position was unmasked.
    commit_conf: float32 [B, L] model probability of the committed token at its commit step.
    step_conf: float32 [S, B, L] top-1 probability of every still-masked completion position when the
      model saw x_s (0 where already committed), or None when not recorded.
    step_entropy: float32 [S, B, L] predictive entropy (nats) in the same layout, or None.
    commit_hidden: [B, L, D] final hidden state of each completion position at its commit step (the
      features DelTA reads, DESIGN §6), or None when not recorded.
    prompt_len: P (static).
    num_model_calls: forward passes of the static schedule (static; = S, the upper bound).
    model_calls: int32 [] forward passes actually run: S for plain decoding, fewer when threshold
      decoding finished blocks early (with ``kv_cache`` each block's first call is a full pass, the
      others run only the cached query window); None for trajectories not made by :func:`rollout`.
  """

  tokens: jax.Array
  completion_mask: jax.Array
  commit_step: jax.Array
  commit_conf: jax.Array
  step_conf: jax.Array | None = None
  step_entropy: jax.Array | None = None
  commit_hidden: jax.Array | None = None
  prompt_len: int = flax.struct.field(pytree_node=False, default=0)
  num_model_calls: int = flax.struct.field(pytree_node=False, default=0)
  model_calls: jax.Array | None = None

  @property
  def completion(self) -> jax.Array:
    """int32 [B, L] completion tokens."""
    return self.tokens[:, self.prompt_len:]


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


def decode_step(logits: jax.Array, state: DecodeState, s: jax.Array, blk: jax.Array, k: jax.Array,
                step_key: jax.Array, *, lo: int, prompt_len: int, cfg: RolloutConfig, mask_id: int,
                record_step_conf: bool, record_step_entropy: bool,
                hidden: jax.Array | None = None) -> tuple[DecodeState, dict]:
  """One remasking step from the logits of the completion positions ``[lo, lo+W)``.

  Args:
    logits: float32 [B, W, V] for completion positions lo..lo+W-1 (W = L for a full pass); every
      still-masked position of the current block must lie in the window.
    state: the carry; s: global step index; blk: its block; k: tokens the schedule commits.
    step_key: this step's key (split as in the module docstring; noise is drawn at full [B, L]
      size and sliced, so a window sees the same noise as a full pass).
    hidden: [B, W, D] final hidden states of the window (needed when ``state.hidden`` is set).
  Returns:
    (new state, records {"conf"/"entropy": float32 [B, L], 0 where already committed}).
  """
  x, commit_step, commit_conf, conf, ent, commit_hidden = state
  b, length = commit_step.shape
  w = logits.shape[1]
  hi = lo + w
  k_gumbel, k_remask = jax.random.split(step_key)
  comp = x[:, prompt_len:]
  masked_all = comp == mask_id  # [B, L]
  win = comp[:, lo:hi]
  masked = masked_all[:, lo:hi]
  logz = jax.nn.logsumexp(logits, axis=-1)  # [B, W]
  if cfg.temperature > 0:
    noise = jax.random.gumbel(k_gumbel, (b, length, logits.shape[-1]), jnp.float32)[:, lo:hi]
    x0 = jnp.argmax(logits + cfg.temperature * noise, axis=-1).astype(jnp.int32)
  else:
    x0 = jnp.argmax(logits, axis=-1).astype(jnp.int32)
  cand_prob = jnp.exp(jnp.take_along_axis(logits, x0[..., None], -1)[..., 0] - logz)
  if w == length:
    score = REMASKING.get(cfg.remasking)(cand_prob, k_remask)
  else:  # the random rule draws at [B, L]: pad so that a window gets the full pass's draw
    padded = jnp.zeros((b, length), jnp.float32).at[:, lo:hi].set(cand_prob)
    score = REMASKING.get(cfg.remasking)(padded, k_remask)[:, lo:hi]
  pos = lo + jnp.arange(w, dtype=jnp.int32)[None, :]
  eligible = masked & (pos < (blk + 1) * cfg.block_length)
  score = jnp.where(eligible, score, -jnp.inf)
  chosen = _stable_rank_desc(score) < k
  if cfg.threshold > 0:
    chosen |= cand_prob > cfg.threshold
  commit = eligible & chosen
  new_win = jnp.where(commit, x0, win)
  commit_step = commit_step.at[:, lo:hi].set(jnp.where(commit, s, commit_step[:, lo:hi]))
  commit_conf = commit_conf.at[:, lo:hi].set(jnp.where(commit, cand_prob, commit_conf[:, lo:hi]))
  if commit_hidden is not None:
    commit_hidden = commit_hidden.at[:, lo:hi].set(
        jnp.where(commit[..., None], hidden.astype(commit_hidden.dtype), commit_hidden[:, lo:hi]))
  out = {}
  if record_step_conf:
    conf = conf.at[:, lo:hi].set(jnp.exp(jnp.max(logits, axis=-1) - logz))
    out["conf"] = jnp.where(masked_all, conf, 0.0)
  if record_step_entropy:
    logq = logits - logz[..., None]
    ent = ent.at[:, lo:hi].set(-jnp.sum(jnp.exp(logq) * logq, axis=-1))
    out["entropy"] = jnp.where(masked_all, ent, 0.0)
  x = x.at[:, prompt_len + lo:prompt_len + hi].set(new_win)
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
  model would have produced at the skipped step (DESIGN §3's layout stays exact for DPS / DTCA)."""

  def fill(nxt, row_ex):
    row, ex = row_ex
    row = jnp.where(ex > 0, row, nxt)
    return row, row

  _, filled = jax.lax.scan(fill, jnp.zeros_like(records[0]), (records, executed), reverse=True)
  return filled


def finish_trajectory(state: DecodeState, rec: dict, executed: jax.Array, *, prompt_len: int,
                      cfg: RolloutConfig, eos_id: int) -> Trajectory:
  """Packs the loop's final state and stacked records ([S, B, L]) into a :class:`Trajectory`."""
  if cfg.threshold > 0:
    rec = {name: backfill_skipped(r, executed) for name, r in rec.items()}
  return Trajectory(
      tokens=state.x,
      completion_mask=completion_mask_from_eos(state.x[:, prompt_len:], eos_id),
      commit_step=state.commit_step,
      commit_conf=state.commit_conf,
      step_conf=rec.get("conf"),
      step_entropy=rec.get("entropy"),
      commit_hidden=state.hidden,
      prompt_len=prompt_len,
      num_model_calls=cfg.steps,
      model_calls=jnp.sum(executed).astype(jnp.int32),
  )


def record_keys(record_step_conf: bool, record_step_entropy: bool) -> tuple[str, ...]:
  return (("conf",) if record_step_conf else ()) + (("entropy",) if record_step_entropy else ())


def rollout(logits_fn: Any, params: Any, prompts: jax.Array, key: jax.Array, cfg: RolloutConfig, *,
            mask_id: int, eos_id: int, record_step_conf: bool = False,
            record_step_entropy: bool = False, record_commit_hidden: bool = False,
            kv_fns: Any = None) -> Trajectory:
  """Samples completions for ``prompts`` (jit this, or call :func:`make_rollout_fn`).

  Args:
    logits_fn: pure ``(params, tokens[B, T] int32) -> logits[B, T, V]``.
    params: model parameters.
    prompts: int32 [B, P] prompt tokens (never masked, never changed).
    key: PRNG key.
    cfg: sampler geometry (static).
    mask_id: ``[MASK]`` id; eos_id: end-of-sequence id.
    record_step_conf: also return ``step_conf [S, B, L]`` (DPS / DTCA inputs).
    record_step_entropy: also return ``step_entropy [S, B, L]``.
    record_commit_hidden: also return ``commit_hidden [B, L, D]``; ``logits_fn`` must then return
      ``(logits, hidden)`` (``make_logits_fn(graphdef, return_hidden=True)``).
    kv_fns: for ``cfg.kv_cache != "none"``: the model's :class:`daca_jax.models.kv_cache.KVFns`;
      None takes them from ``logits_fn`` (made by ``daca_jax.models.make_logits_fn``).
  Returns:
    A :class:`Trajectory`.
  Raises:
    ConfigError: a bad geometry, or a K/V cache requested for a logits_fn without a model graph.
  """
  cfg.validate()  # trace time only: a bad geometry is a clear ConfigError, never a silent half-decode
  if cfg.kv_cache != "none":
    from daca_jax.diffusion.fast import cached_rollout  # fast.py imports this module

    return cached_rollout(logits_fn, params, prompts, key, cfg, mask_id=mask_id, eos_id=eos_id,
                          record_step_conf=record_step_conf, record_step_entropy=record_step_entropy,
                          record_commit_hidden=record_commit_hidden, kv_fns=kv_fns)
  p = prompts.shape[1]
  steps = cfg.steps
  keys = record_keys(record_step_conf, record_step_entropy)
  opts = dict(prompt_len=p, cfg=cfg, mask_id=mask_id)

  def step(state, inputs):
    s, blk, k, step_key = inputs

    def run(st):
      out = logits_fn(params, st.x)
      logits, hidden = out if record_commit_hidden else (out, None)
      return decode_step(logits[:, p:].astype(jnp.float32), st, s, blk, k, step_key, lo=0,
                         record_step_conf=record_step_conf, record_step_entropy=record_step_entropy,
                         hidden=None if hidden is None else hidden[:, p:], **opts)

    new, rec, executed = maybe_skip(run, state, blk, record_keys=keys, **opts)
    return new, (rec, executed)

  xs = (jnp.arange(steps, dtype=jnp.int32), jnp.arange(steps, dtype=jnp.int32) // cfg.steps_per_block,
        jnp.asarray(tokens_per_step(cfg)), jax.random.split(key, steps))
  hidden_like = None
  if record_commit_hidden:
    _, hidden_like = jax.eval_shape(lambda t: logits_fn(params, t), init_state(prompts, cfg.gen_length, mask_id).x)
  state, (rec, executed) = jax.lax.scan(step, init_state(prompts, cfg.gen_length, mask_id, hidden_like), xs)
  return finish_trajectory(state, rec, executed, prompt_len=p, cfg=cfg, eos_id=eos_id)

def make_rollout_fn(logits_fn: Any, cfg: RolloutConfig, *, mask_id: int, eos_id: int,
                    record_step_conf: bool = False, record_step_entropy: bool = False,
                    record_commit_hidden: bool = False, kv_fns: Any = None):
  """Returns ``jit(rollout)`` as ``fn(params, prompts[B, P], key) -> Trajectory``."""
  cfg.validate()
  return jax.jit(functools.partial(rollout, logits_fn, cfg=cfg, mask_id=mask_id, eos_id=eos_id,
                                   record_step_conf=record_step_conf,
                                   record_step_entropy=record_step_entropy,
                                   record_commit_hidden=record_commit_hidden, kv_fns=kv_fns))
