"""LLaDA-architecture bidirectional transformer (Flax NNX) exposed as a pure ``LogitsFn``.

Architecture (LLaDA-8B, Nie et al. 2025, "Large Language Diffusion Models"): token embedding, N pre-norm
blocks (RMSNorm -> multi-head attention with RoPE and **no causal mask** -> residual; RMSNorm -> SwiGLU
MLP -> residual), final RMSNorm, untied output projection (tie optional), no biases. Grouped-query
attention through ``n_kv_heads``. Layers are stacked on a leading axis and applied with ``lax.scan``
(one compiled block, optional remat), so compile time does not grow with depth.

Two properties of the model family live in the config: ``shift_logits`` (Dream reads position i's
prediction from the state at i - 1) and ``left_pad_id`` (Dream keeps left padding out of attention and
numbers positions from the first real token; LLaDA attends to everything): :meth:`Transformer.layout`
turns the tokens into the positions and key mask every pass (full or K/V-cached) uses.

The library never calls the module directly: :func:`make_logits_fn` turns the graph definition into a
pure ``logits_fn(params, tokens) -> logits`` over an ``nnx.State`` of parameters.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import nnx

from daca_jax.contracts import LogitsFn, ModelFns  # noqa: F401  (LogitsFn re-exported)
from daca_jax.contracts.sharding import batch_sharded
from daca_jax.config.checks import DTYPES as _DTYPES
from daca_jax.config.model import ModelConfig, llada_8b_config, tiny_config

Params = Any  # an nnx.State (pytree) of parameters
# LoRA adapters: {target: {"a": [N, in, r], "b": [N, r, out]}}; one layer's slice inside a Block
# (see models/lora.py).
Adapters = Any

# Short LoRA target names (ModelConfig.lora_targets) -> the Block's projection attributes.
LORA_MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj",
                "up": "up_proj", "down": "down_proj"}
_LORA_INDEX = {t: i for i, t in enumerate(LORA_MODULES)}  # folds each target's dropout key apart

_REMAT_POLICIES = {
    "full": None,  # save nothing: recompute the whole block in the backward pass
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
}


class RMSNorm(nnx.Module):
  """Root-mean-square norm with a learned scale, computed in float32."""

  def __init__(self, dim: int, eps: float, param_dtype: Any):
    self.scale = nnx.Param(jnp.ones((dim,), param_dtype))
    self.eps = eps

  def __call__(self, x: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    return (y * self.scale[...].astype(jnp.float32)).astype(x.dtype)


def rope(x: jax.Array, positions: jax.Array, theta: float) -> jax.Array:
  """Rotary embedding (rotate-half convention of Llama/LLaDA).

  Args:
    x: [B, T, H, Dh] queries or keys.
    positions: [B, T] int32 absolute positions.
    theta: RoPE base.
  Returns:
    [B, T, H, Dh], same dtype as ``x``.
  """
  half = x.shape[-1] // 2
  inv_freq = 1.0 / (theta ** (jnp.arange(half, dtype=jnp.float32) / half))
  ang = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, half]
  cos = jnp.cos(ang)[:, :, None, :]
  sin = jnp.sin(ang)[:, :, None, :]
  x32 = x.astype(jnp.float32)
  x1, x2 = x32[..., :half], x32[..., half:]
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x.dtype)


class Block(nnx.Module):
  """One pre-norm transformer block with bidirectional attention and a SwiGLU MLP."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    dt, pdt = _DTYPES[cfg.dtype], _DTYPES[cfg.param_dtype]
    init = nnx.initializers.normal(stddev=0.02)
    lin = lambda i, o, bias=False: nnx.Linear(i, o, use_bias=bias, dtype=dt, param_dtype=pdt,
                                              kernel_init=init, rngs=rngs)
    hd = cfg.head_dim
    self.cfg = cfg
    self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps, pdt)
    self.q_proj = lin(cfg.d_model, cfg.n_heads * hd, cfg.qkv_bias)
    self.k_proj = lin(cfg.d_model, cfg.kv_heads * hd, cfg.qkv_bias)
    self.v_proj = lin(cfg.d_model, cfg.kv_heads * hd, cfg.qkv_bias)
    self.o_proj = lin(cfg.n_heads * hd, cfg.d_model)
    self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps, pdt)
    self.gate_proj = lin(cfg.d_model, cfg.mlp_dim)
    self.up_proj = lin(cfg.d_model, cfg.mlp_dim)
    self.down_proj = lin(cfg.mlp_dim, cfg.d_model)

  def proj(self, target: str, h: jax.Array, lora: Adapters | None = None,
           dropout_key: jax.Array | None = None) -> jax.Array:
    """Projection ``target`` (a key of ``LORA_MODULES``) of ``h [B, T, in]``, plus its LoRA term.

    With adapters ``{"a": [in, r], "b": [r, out]}`` for ``target`` the output is
    ``h W + (lora_alpha / lora_rank) (drop(h) A) B`` (Hu et al. 2021), in the compute dtype. ``drop`` is
    inverted dropout at ``cfg.lora_dropout`` with ``dropout_key`` (one independent mask per target, as
    PEFT's per-module ``lora_dropout``); the identity when the key is None (rollouts, evaluation).
    """
    y = getattr(self, LORA_MODULES[target])(h)
    if lora is not None and target in lora:
      dt = y.dtype
      x = h.astype(dt)
      rate = self.cfg.lora_dropout
      if dropout_key is not None and rate > 0:
        keep = jax.random.bernoulli(jax.random.fold_in(dropout_key, _LORA_INDEX[target]), 1.0 - rate, x.shape)
        x = jnp.where(keep, x / (1.0 - rate), jnp.zeros((), dt)).astype(dt)
      delta = (x @ lora[target]["a"].astype(dt)) @ lora[target]["b"].astype(dt)
      y = y + (self.cfg.lora_alpha / self.cfg.lora_rank) * delta
    return batch_sharded(y)

  def qkv(self, x: jax.Array, positions: jax.Array, lora: Adapters | None = None,
          dropout_key: jax.Array | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Pre-norm projections of ``x [B, T, D]``: q [B, T, H, Dh], k and v [B, T, Hkv, Dh] (RoPE on q, k).
    ``dropout_key``: LoRA dropout (:meth:`proj`)."""
    cfg = self.cfg
    b, t, _ = x.shape
    hd = cfg.head_dim
    h = self.attn_norm(x)
    q = rope(self.proj("q", h, lora, dropout_key).reshape(b, t, cfg.n_heads, hd), positions, cfg.rope_theta)
    k = rope(self.proj("k", h, lora, dropout_key).reshape(b, t, cfg.kv_heads, hd), positions, cfg.rope_theta)
    v = self.proj("v", h, lora, dropout_key).reshape(b, t, cfg.kv_heads, hd)
    return q, k, v

  def mix(self, x: jax.Array, q: jax.Array, k: jax.Array, v: jax.Array,
          lora: Adapters | None = None, key_mask: jax.Array | None = None,
          dropout_key: jax.Array | None = None) -> jax.Array:
    """Attention of the queries of ``x [B, T, D]`` over keys/values of any length S ([B, S, Hkv, Dh];
    a K/V cache passes its own), residual, then the MLP. Returns [B, T, D].

    ``key_mask`` (bool [B, S], or None for all keys) hides keys from every query: left padding of a
    family with ``left_pad_id`` (:meth:`Transformer.layout`). There is no causal mask: masked
    diffusion is bidirectional."""
    cfg = self.cfg
    b, t, _ = x.shape
    mask = None if key_mask is None else key_mask[:, None, None, :]
    attn = jax.nn.dot_product_attention(q, k, v, mask=mask, scale=cfg.head_dim ** -0.5)
    x = x + self.proj("o", attn.reshape(b, t, cfg.n_heads * cfg.head_dim), lora, dropout_key)
    h = self.mlp_norm(x)
    inner = jax.nn.silu(self.proj("gate", h, lora, dropout_key)) * self.proj("up", h, lora, dropout_key)
    return x + self.proj("down", inner, lora, dropout_key)

  def __call__(self, x: jax.Array, positions: jax.Array, lora: Adapters | None = None,
               key_mask: jax.Array | None = None, dropout_key: jax.Array | None = None) -> jax.Array:
    return self.mix(x, *self.qkv(x, positions, lora, dropout_key), lora, key_mask, dropout_key)


def shift_right(x: jax.Array) -> jax.Array:
  """``x [B, T, ...]`` moved one position right, position 0 keeping its own: Dream's
  ``cat([logits[:, :1], logits[:, :-1]])`` (the state at i - 1 predicts token i)."""
  return jnp.concatenate([x[:, :1], x[:, :-1]], axis=1)


class Transformer(nnx.Module):
  """LLaDA-style masked diffusion LM. Call: ``tokens [B, T] int32 -> logits [B, T, V] float32``."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    cfg.validate().validate_architecture()
    self.cfg = cfg
    pdt = _DTYPES[cfg.param_dtype]
    self.embed = nnx.Embed(cfg.vocab_size, cfg.d_model, dtype=_DTYPES[cfg.dtype], param_dtype=pdt,
                           embedding_init=nnx.initializers.normal(stddev=0.02), rngs=rngs)

    @nnx.split_rngs(splits=cfg.n_layers)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def make_layers(rngs: nnx.Rngs) -> Block:
      return Block(cfg, rngs)

    self.layers = make_layers(rngs)
    self.final_norm = RMSNorm(cfg.d_model, cfg.norm_eps, pdt)
    if not cfg.tie_embeddings:
      self.lm_head = nnx.Linear(cfg.d_model, cfg.vocab_size, use_bias=False, dtype=_DTYPES[cfg.dtype],
                                param_dtype=pdt, kernel_init=nnx.initializers.normal(stddev=0.02),
                                rngs=rngs)

  def layout(self, tokens: jax.Array) -> tuple[jax.Array, jax.Array | None]:
    """Positions and key mask of ``tokens [B, T] int32``: (int32 [B, T], bool [B, T] or None).

    ``cfg.left_pad_id == -1`` (LLaDA): positions 0..T-1 and no mask. Otherwise (Dream's
    ``diffusion_generate``) the leading run of ``left_pad_id`` is padding: those keys are masked
    and the real tokens are numbered from 0 (``attention_mask.cumsum(-1) - 1``), so a padded row
    computes what the same row computes unpadded. Only a leading run counts: the same id later in
    the sequence (Dream's pad is also its EOS) is an ordinary token.
    """
    t = tokens.shape[-1]
    if self.cfg.left_pad_id < 0:
      return jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), tokens.shape), None
    real = jnp.cumsum((tokens != self.cfg.left_pad_id).astype(jnp.int32), axis=-1) > 0
    positions = jnp.maximum(jnp.cumsum(real.astype(jnp.int32), axis=-1) - 1, 0)
    return positions, real

  def residual(self, tokens: jax.Array, positions: jax.Array | None = None,
               lora: Adapters | None = None, dropout_key: jax.Array | None = None) -> jax.Array:
    """Embedding and all blocks: ``tokens [B, T] int32 -> residual [B, T, D]`` (compute dtype).

    ``positions`` (int32 [B, T]) overrides :meth:`layout`'s; the key mask always comes from the tokens.
    With ``cfg.shift_logits`` the result is shifted one position right (:func:`shift_right`), so
    that position i is predicted from the state at i - 1 as Dream does. ``dropout_key`` turns on LoRA
    dropout (``cfg.lora_dropout``, :meth:`Block.proj`), one key per layer split from it.
    """
    cfg = self.cfg
    own_positions, key_mask = self.layout(tokens)
    positions = own_positions if positions is None else positions
    x = self.embed(tokens)
    graphdef, layer_state = nnx.split(self.layers)
    layer_keys = None
    if dropout_key is not None and lora is not None and cfg.lora_dropout > 0:
      layer_keys = jax.random.split(dropout_key, cfg.n_layers)

    def body(h, xs):
      state, layer_lora, key = xs
      return nnx.merge(graphdef, state)(batch_sharded(h), positions, layer_lora, key_mask, key), None

    if cfg.remat != "none":
      body = jax.checkpoint(body, policy=_REMAT_POLICIES[cfg.remat])
    x, _ = jax.lax.scan(body, x, (layer_state, lora, layer_keys),
                        unroll=cfg.n_layers if cfg.unroll_layers else 1)
    return shift_right(x) if cfg.shift_logits else x

  def __call__(self, tokens: jax.Array, positions: jax.Array | None = None,
               return_hidden: bool = False, lora: Adapters | None = None, dropout_key: jax.Array | None = None):
    logits, hidden = self.head(self.residual(tokens, positions, lora, dropout_key))
    return (logits, hidden) if return_hidden else logits

  def head(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Final norm and output projection of the residual ``x [B, T, D]``: (logits f32 [B, T, V], hidden)."""
    hidden = self.final_norm(x)
    return self.output(hidden), hidden

  def output(self, hidden: jax.Array) -> jax.Array:
    """Output projection of final-norm states ``hidden [..., D] -> logits [..., V] float32``."""
    logits = self.embed.attend(hidden) if self.cfg.tie_embeddings else self.lm_head(hidden)
    return logits.astype(jnp.float32)


def init_model(cfg: ModelConfig, seed: int = 0) -> tuple[nnx.GraphDef, Params]:
  """Builds the model and splits it into (graphdef, params) where params is an ``nnx.State``."""
  model = Transformer(cfg, nnx.Rngs(seed))
  graphdef, params = nnx.split(model, nnx.Param)
  return graphdef, params


def make_logits_fn(graphdef: nnx.GraphDef, return_hidden: bool = False, logprob_chunk: int = 0) -> ModelFns:
  """Returns the model as a :class:`~daca_jax.contracts.ModelFns`, callable as the pure
  ``logits_fn(params, tokens[B, T] int32, positions=None)``.

  Args:
    graphdef: from :func:`init_model`.
    return_hidden: when True the function returns ``(logits [B, T, V] float32, hidden [B, T, D])``,
      ``hidden`` being the final-norm hidden states that feed the output projection (DelTA's token
      features); otherwise only ``logits``.
    logprob_chunk: > 0 makes the likelihood estimators gather target log-probs ``logprob_chunk``
      positions at a time (:func:`daca_jax.likelihood.common.score_targets`); the logits the
      function returns are unchanged.

  The value carries the model split (``hidden``: :func:`make_hidden_fn`, ``head``:
  :func:`make_head_fn`) and ``logprob_chunk``: estimators that need only some positions project just
  those (:func:`daca_jax.likelihood.common.score_positions`), and the sampler projects only a chunk
  of positions at a time (:mod:`daca_jax.diffusion.rollout`). ``config(params)`` returns the graph's
  :class:`ModelConfig` (the sampler reads ``vocab_limit`` and ``mask_token_id``); ``graph`` lets the
  rollout's K/V cache (:mod:`daca_jax.models.kv_cache`) reuse the layers.
  """

  def logits_fn(params: Params, tokens: jax.Array, positions: jax.Array | None = None):
    return nnx.merge(graphdef, params)(tokens, positions, return_hidden=return_hidden)

  return ModelFns(logits=logits_fn, hidden=make_hidden_fn(graphdef), head=make_head_fn(graphdef),
                  logprob_chunk=int(logprob_chunk), config=lambda params: model_config(graphdef, params),
                  graph=graphdef, returns_hidden=return_hidden)


def model_config(graphdef: nnx.GraphDef, params: Params) -> ModelConfig:
  """The :class:`ModelConfig` a graph was built from (works on traced or abstract ``params``)."""
  return nnx.merge(graphdef, params).cfg


def make_hidden_fn(graphdef: nnx.GraphDef) -> Callable[..., jax.Array]:
  """Returns ``hidden_fn(params, tokens[B, T] int32, positions=None) -> hidden [B, T, D]``, the
  final-norm states (compute dtype) that :func:`make_head_fn` projects to logits.

  The split lets target log-probs be gathered chunk by chunk so the float32 ``[B, T, V]`` logits
  never exist at once (:func:`daca_jax.likelihood.common.chunked_token_logprobs`).
  """

  def hidden_fn(params: Params, tokens: jax.Array, positions: jax.Array | None = None):
    model = nnx.merge(graphdef, params)
    return model.final_norm(model.residual(tokens, positions))

  return hidden_fn


def make_head_fn(graphdef: nnx.GraphDef) -> Callable[..., jax.Array]:
  """Returns ``head_fn(params, hidden[..., D]) -> logits [..., V] float32`` (output projection only)."""

  def head_fn(params: Params, hidden: jax.Array):
    return nnx.merge(graphdef, params).output(hidden)

  return head_fn


def count_params(params: Params) -> int:
  return sum(int(x.size) for x in jax.tree.leaves(params))
