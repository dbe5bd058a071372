"""Block-wise K/V cache for masked-diffusion decoding (Fast-dLLM's prefix and dual caches).

Fast-dLLM (Wu et al. 2025, "Fast-dLLM: Training-free Acceleration of Diffusion LLM by Enabling KV Cache
and Parallel Decoding"): within a semi-autoregressive block the keys/values of the tokens outside the
block change little from step to step, so the first step of each block runs the full sequence once and
keeps every layer's K/V; the block's later steps feed only some query positions and attend over the
cached K/V with the queries' own fresh K/V written in:

- ``prefix``: queries = the block and everything after it; keys = cached prefix + fresh queries.
- ``dual``: queries = the block only; keys = cached prefix + fresh block + cached suffix.

This reuses the model's own parameters and layer math (:meth:`Block.qkv` / :meth:`Block.mix` /
:meth:`Transformer.head` of ``daca_jax.models.llada``) and the family's properties:

- ``shift_logits`` (Dream): position i is read from the state at i - 1, so a query window starting at
  ``start`` also runs the query at ``start - 1`` (its K/V are recomputed and written over the cached
  ones) and the window's states are shifted as the full pass shifts them.
- ``left_pad_id`` (Dream): the prefill keeps the key mask and each row's pad count, so a cached step
  masks the pads and numbers positions as the full pass does (:meth:`Transformer.layout`).

:func:`KVFns.prefill` therefore returns the same logits as the model's full pass, and with a cache built
from the current tokens :func:`KVFns.extend` equals the full pass on the query positions (tested for
LLaDA and Dream checkpoints); with a stale cache it is Fast-dLLM's approximation.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from daca_jax.contracts import as_model_fns
from daca_jax.errors import ConfigError
from daca_jax.models.llada import shift_right


class KVCache(NamedTuple):
  """Every layer's keys and values of one full pass, and the padding layout they were built with.

  k, v: [N_layers, B, T, Hkv, Dh] (a "prefix" cache may keep only the first positions).
  key_mask: bool [B, T_full] real (non-padding) positions, or None when the family attends to pads.
  pads: int32 [B] leading pad count per row (positions are ``index - pads``), or None.
  """

  k: jax.Array
  v: jax.Array
  key_mask: jax.Array | None = None
  pads: jax.Array | None = None

  def prefix(self, n: int) -> "KVCache":
    """The cache of the first ``n`` positions' K/V (all a "prefix" step reads); the mask stays whole."""
    return self._replace(k=self.k[:, :, :n], v=self.v[:, :, :n])


class KVFns(NamedTuple):
  """Pure functions of ``(params, ...)`` over one model graph.

  * ``prefill(params, tokens[B, T] int32) -> (logits f32 [B, T, V], hidden [B, T, D], KVCache)``.
  * ``extend(params, tokens[B, T] int32, start: int, width: int (both static), cache, mode)
    -> (logits f32 [B, W, V], hidden [B, W, D])`` of the W query positions ``start .. start+W-1`` of
    the current sequence ``tokens`` ("prefix": W = T - start).
  * ``head(params, hidden[..., D]) -> logits f32 [..., V]`` (what the sampler projects chunk by chunk).

  Under ``jit`` unused logits are never computed.
  """

  prefill: Callable[..., tuple[jax.Array, jax.Array, KVCache]]
  extend: Callable[..., tuple[jax.Array, jax.Array]]
  head: Callable[..., jax.Array]


def make_kv_fns(graphdef: nnx.GraphDef, lora: bool = False) -> KVFns:
  """Builds :class:`KVFns` for a ``daca_jax.models.llada.Transformer`` graph (from ``init_model``).

  ``lora=True``: the functions take a LoRA policy's ``params = {"base", "lora"}``
  (:mod:`daca_jax.models.lora`) and apply the adapters in every projection, as its ``LogitsFn`` does.
  """

  def _layers(params: Any):
    base, adapters = (jax.lax.stop_gradient(params["base"]), params["lora"]) if lora else (params, None)
    model = nnx.merge(graphdef, base)
    layer_gd, layer_state = nnx.split(model.layers)
    return model, layer_gd, layer_state, adapters

  def prefill(params: Any, tokens: jax.Array) -> tuple[jax.Array, jax.Array, KVCache]:
    model, layer_gd, layer_state, adapters = _layers(params)
    positions, key_mask = model.layout(tokens)

    def body(h, xs):
      state, layer_lora = xs
      blk = nnx.merge(layer_gd, state)
      q, k, v = blk.qkv(h, positions, layer_lora)
      return blk.mix(h, q, k, v, layer_lora, key_mask), (k, v)

    x, (k, v) = jax.lax.scan(body, model.embed(tokens), (layer_state, adapters))
    if model.cfg.shift_logits:
      x = shift_right(x)
    pads = None if key_mask is None else jnp.sum(~key_mask, axis=-1).astype(jnp.int32)
    return (*model.head(x), KVCache(k, v, key_mask, pads))

  def extend(params: Any, tokens: jax.Array, start: int, width: int, cache: KVCache,
             mode: str) -> tuple[jax.Array, jax.Array]:
    if mode not in ("prefix", "dual"):
      raise ConfigError("rollout.kv_cache", mode, "one of ['prefix', 'dual'] for a cached step")
    model, layer_gd, layer_state, adapters = _layers(params)
    b, t = tokens.shape
    if mode == "prefix" and start + width != t:
      raise ValueError(f"K/V cache (prefix): the queries must run to the end ({start}+{width} != {t})")
    # A shifted family reads position `start` from the state at start - 1: run that query too.
    q_lo = start - 1 if model.cfg.shift_logits and start > 0 else start
    hi = start + width
    cached = cache.k.shape[2]
    needed = q_lo if mode == "prefix" else t
    if cached < needed:
      raise ValueError(f"K/V cache ({mode}): {cached} cached positions, queries at {q_lo}..{hi - 1} "
                       f"need {needed}")
    offs = q_lo + jnp.arange(hi - q_lo, dtype=jnp.int32)[None, :]
    positions = (jnp.broadcast_to(offs, (b, hi - q_lo)) if cache.pads is None
                 else jnp.maximum(offs - cache.pads[:, None], 0))

    def body(h, xs):
      state, layer_lora, k_c, v_c = xs
      blk = nnx.merge(layer_gd, state)
      q, k, v = blk.qkv(h, positions, layer_lora)
      if mode == "prefix":  # positions >= q_lo are all queries: cached prefix + fresh rest
        k_all = jnp.concatenate([k_c[:, :q_lo], k], axis=1)
        v_all = jnp.concatenate([v_c[:, :q_lo], v], axis=1)
      else:
        k_all = jax.lax.dynamic_update_slice_in_dim(k_c, k, q_lo, axis=1)
        v_all = jax.lax.dynamic_update_slice_in_dim(v_c, v, q_lo, axis=1)
      return blk.mix(h, q, k_all, v_all, layer_lora, cache.key_mask), None

    x, _ = jax.lax.scan(body, model.embed(tokens[:, q_lo:hi]), (layer_state, adapters, cache.k, cache.v))
    if model.cfg.shift_logits:  # x covers q_lo..hi-1; the window's states are those one to the left
      x = x[:, :width] if q_lo < start else shift_right(x)
    return model.head(x)

  def head(params: Any, hidden: jax.Array) -> jax.Array:
    base = jax.lax.stop_gradient(params["base"]) if lora else params
    return nnx.merge(graphdef, base).output(hidden)

  return KVFns(prefill=prefill, extend=extend, head=head)


def kv_fns_for(logits_fn: Any) -> KVFns:
  """The :class:`KVFns` of a model made by ``daca_jax.models.make_logits_fn`` or
  :func:`daca_jax.models.lora.make_lora_logits_fn` (adapters applied), read from its
  :class:`~daca_jax.contracts.ModelFns` ``graph`` (and ``lora``).

  Raises:
    ConfigError: ``logits_fn`` carries no model graph (a hand-written or wrapped function), so
      ``rollout.kv_cache`` cannot be used with it.
  """
  fns = as_model_fns(logits_fn)
  if fns.graph is None:
    raise ConfigError("rollout.kv_cache", "prefix/dual",
                      "'none' for a logits_fn without a model graph; the cache needs one made by "
                      "daca_jax.models.make_logits_fn (or pass kv_fns=make_kv_fns(graphdef))")
  return make_kv_fns(fns.graph, lora=fns.lora)
