"""Block-wise K/V cache for masked-diffusion decoding (Fast-dLLM's prefix and dual caches).

Fast-dLLM (Wu et al. 2025, "Fast-dLLM: Training-free Acceleration of Diffusion LLM by Enabling KV Cache
and Parallel Decoding"): within a semi-autoregressive block the keys/values of the tokens outside the
block change little from step to step, so the first step of each block runs the full sequence once and
keeps every layer's K/V; the block's later steps feed only some query positions and attend over the
cached K/V with the queries' own fresh K/V written in:

- ``prefix``: queries = the block and everything after it; keys = cached prefix + fresh queries.
- ``dual``: queries = the block only; keys = cached prefix + fresh block + cached suffix.

This reuses the model's own parameters and layer math (:meth:`Block.qkv` / :meth:`Block.mix` /
:meth:`Transformer.head` of ``daca_jax.models.llada``), so :func:`KVFns.prefill` returns the same
logits as the model's full pass. With a cache built from the current tokens, :func:`KVFns.extend` equals
the full pass on the query positions (tested); with a stale cache it is Fast-dLLM's approximation.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from daca_jax.errors import ConfigError

KV = tuple[jax.Array, jax.Array]  # (k, v), each [N_layers, B, T, Hkv, Dh]


class KVFns(NamedTuple):
  """Pure functions of ``(params, ...)`` over one model graph.

  prefill(params, tokens[B, T] int32) -> (logits f32 [B, T, V], hidden [B, T, D],
    (k, v) [N, B, T, Hkv, Dh]).
  extend(params, q_tokens[B, W] int32, start: int (static), cache, mode: "prefix"|"dual")
    -> (logits f32 [B, W, V], hidden [B, W, D]) of the W query positions ``start .. start+W-1``.
  """

  prefill: Callable[..., tuple[jax.Array, jax.Array, KV]]
  extend: Callable[..., tuple[jax.Array, jax.Array]]


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

  def prefill(params: Any, tokens: jax.Array) -> tuple[jax.Array, jax.Array, KV]:
    model, layer_gd, layer_state, adapters = _layers(params)
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[-1], dtype=jnp.int32), tokens.shape)

    def body(h, xs):
      state, layer_lora = xs
      blk = nnx.merge(layer_gd, state)
      q, k, v = blk.qkv(h, positions, layer_lora)
      return blk.mix(h, q, k, v, layer_lora), (k, v)

    x, kv = jax.lax.scan(body, model.embed(tokens), (layer_state, adapters))
    return (*model.head(x), kv)

  def extend(params: Any, q_tokens: jax.Array, start: int, cache: KV,
             mode: str) -> tuple[jax.Array, jax.Array]:
    if mode not in ("prefix", "dual"):
      raise ConfigError("rollout.kv_cache", mode, "one of ['prefix', 'dual'] for a cached step")
    model, layer_gd, layer_state, adapters = _layers(params)
    b, w = q_tokens.shape
    total = cache[0].shape[2]
    needed = start if mode == "prefix" else start + w
    if total < needed:
      raise ValueError(f"K/V cache ({mode}): {total} cached positions, queries at {start}..{start + w - 1} "
                       f"need {needed}")
    positions = jnp.broadcast_to(start + jnp.arange(w, dtype=jnp.int32), (b, w))

    def body(h, xs):
      state, layer_lora, k_c, v_c = xs
      blk = nnx.merge(layer_gd, state)
      q, k, v = blk.qkv(h, positions, layer_lora)
      if mode == "prefix":  # positions >= start are all queries: cached prefix + fresh rest
        k_all = jnp.concatenate([k_c[:, :start], k], axis=1)
        v_all = jnp.concatenate([v_c[:, :start], v], axis=1)
      else:
        k_all = jax.lax.dynamic_update_slice_in_dim(k_c, k, start, axis=1)
        v_all = jax.lax.dynamic_update_slice_in_dim(v_c, v, start, axis=1)
      return blk.mix(h, q, k_all, v_all, layer_lora), None

    x, _ = jax.lax.scan(body, model.embed(q_tokens), (layer_state, adapters, *cache))
    return model.head(x)

  return KVFns(prefill=prefill, extend=extend)


def kv_fns_for(logits_fn: Any) -> KVFns:
  """The :class:`KVFns` of a ``logits_fn`` made by ``daca_jax.models.make_logits_fn`` or
  :func:`daca_jax.models.lora.make_lora_logits_fn` (adapters applied).

  Raises:
    ConfigError: ``logits_fn`` carries no model graph (a hand-written or wrapped function), so
      ``rollout.kv_cache`` cannot be used with it.
  """
  lora_graphdef = getattr(logits_fn, "lora_graphdef", None)
  if lora_graphdef is not None:
    return make_kv_fns(lora_graphdef, lora=True)
  graphdef = getattr(logits_fn, "graphdef", None)
  if graphdef is None:
    raise ConfigError("rollout.kv_cache", "prefix/dual",
                      "'none' for a logits_fn without a model graph; the cache needs one made by "
                      "daca_jax.models.make_logits_fn (or pass kv_fns=make_kv_fns(graphdef))")
  return make_kv_fns(graphdef)
