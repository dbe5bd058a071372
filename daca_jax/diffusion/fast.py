"""Rollout with Fast-dLLM's block-wise K/V cache (``RolloutConfig.kv_cache``: "prefix" or "dual").

Behaviour matched: Fast-dLLM ``generate_with_prefix_cache`` / ``generate_with_dual_cache`` (Wu et al.
2025). For each block, the block's first step is a full forward pass over the whole sequence — its logits
drive that step exactly as in plain decoding — and every layer's K/V are kept. The block's later steps
run only a query window against the cache: "prefix" feeds the block and everything after it (cached
K/V before the block), "dual" feeds only the block (cached K/V before and after it). The remasking step,
the threshold option and the PRNG use are those of :func:`daca_jax.diffusion.rollout.rollout`
(:mod:`daca_jax.diffusion.decode`).

Blocks are a Python loop (each block's query window has its own static shape; the number of blocks is
small, e.g. 256/32 = 8), the steps within a block a ``lax.scan``. Records keep the [S, B, L] layout:
positions outside the query window that are still masked (only the suffix, in "dual" mode) keep the
confidence / entropy of the block's full pass — the same staleness the cache itself accepts.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from daca_jax.contracts import check_integer, check_shape
from daca_jax.diffusion.decode import (ModelView, Trajectory, decode_step, finish_trajectory, init_state,
                                      maybe_skip, record_keys, row_window, sampling_setup, tokens_per_step)
from daca_jax.models.kv_cache import kv_fns_for
from daca_jax.config.rollout import RolloutConfig


def cached_rollout(logits_fn: Any, params: Any, prompts: jax.Array, key: jax.Array, cfg: RolloutConfig,
                   *, mask_id: int, eos_id: int, record_step_conf: bool = False,
                   record_step_entropy: bool = False, record_commit_hidden: bool = False,
                   kv_fns: Any = None, vocab_limit: int | None = None, rows: jax.Array | None = None,
                   total_rows: int = 0) -> Trajectory:
  """:func:`daca_jax.diffusion.rollout.rollout` with ``cfg.kv_cache`` in ("prefix", "dual").

  ``Trajectory.model_calls`` counts every forward pass (full or cached); ``num_blocks`` of them are
  full passes. The family's ``shift_logits`` and ``left_pad_id`` are honoured by the cache itself
  (:mod:`daca_jax.models.kv_cache`). Raises ConfigError when ``kv_fns`` is None and ``logits_fn`` has
  no model graph.
  """
  kv = kv_fns if kv_fns is not None else kv_fns_for(logits_fn)
  check_shape("prompts", prompts, ("B", "P"), "[B, P] prompt token ids")
  check_integer("prompts", prompts)
  window = row_window(prompts, rows, total_rows)
  p = prompts.shape[1]
  length, bl, spb = cfg.gen_length, cfg.block_length, cfg.steps_per_block
  keys = record_keys(record_step_conf, record_step_entropy)
  opts = dict(prompt_len=p, cfg=cfg, mask_id=mask_id)
  rec_opts = dict(record_step_conf=record_step_conf, record_step_entropy=record_step_entropy, rows=window)
  k_sched = jnp.asarray(tokens_per_step(cfg))
  step_keys = jax.random.split(key, cfg.steps)
  state = init_state(prompts, length, mask_id)
  head = lambda rows: kv.head(params, rows)
  _, hidden_like, _ = jax.eval_shape(lambda t: kv.prefill(params, t), state.x)
  check_shape("kv_fns.prefill(params, tokens) hidden", hidden_like, (*state.x.shape, "D"),
              f"[B, T, D]: one hidden state per position of tokens {state.x.shape}")
  vocab = jax.eval_shape(head, hidden_like).shape[-1]
  rec_opts["ok"] = sampling_setup(logits_fn, params, vocab, cfg, mask_id, vocab_limit)
  if record_commit_hidden:
    state = init_state(prompts, length, mask_id, hidden_like)
  recs, executed = [], []
  for blk in range(cfg.num_blocks):
    s0 = blk * spb
    _, hidden, cache = kv.prefill(params, state.x)  # the unused full logits are never computed
    state, rec = decode_step(ModelView(hidden[:, p:], head, hidden[:, p:]), state, jnp.int32(s0),
                             jnp.int32(blk), k_sched[s0], step_keys[s0], lo=0, **rec_opts, **opts)
    recs.append(jax.tree.map(lambda r: r[None], rec))
    executed.append(jnp.ones((1,), jnp.int32))
    if spb == 1:
      continue
    lo = blk * bl
    hi = length if cfg.kv_cache == "prefix" else lo + bl
    if cfg.kv_cache == "prefix":  # only the K/V before the block are ever read
      cache = cache.prefix(p + lo)

    def step(st, inputs, lo=lo, hi=hi, cache=cache, blk=blk):
      s, k, step_key = inputs

      def run(st):
        _, hidden = kv.extend(params, st.x, p + lo, hi - lo, cache, cfg.kv_cache)
        return decode_step(ModelView(hidden, head, hidden), st, s, jnp.int32(blk), k, step_key, lo=lo,
                           **rec_opts, **opts)

      new, rec, ex = maybe_skip(run, st, jnp.int32(blk), record_keys=keys, **opts)
      return new, (rec, ex)

    idx = jnp.arange(s0 + 1, s0 + spb, dtype=jnp.int32)
    state, (rec, ex) = jax.lax.scan(step, state, (idx, k_sched[s0 + 1:s0 + spb], step_keys[s0 + 1:s0 + spb]))
    recs.append(rec)
    executed.append(ex)
  rec = {name: jnp.concatenate([r[name] for r in recs], axis=0) for name in keys}
  return finish_trajectory(state, rec, jnp.concatenate(executed), prompt_len=p, cfg=cfg, eos_id=eos_id,
                           mask_id=mask_id)
