"""LoRA adapters (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") for the
LLaDA transformer, as a separate pytree beside the frozen base parameters.

A LoRA policy's parameters are ``{"base": nnx.State, "lora": adapters}`` with adapters
``{target: {"a": [N, in, r], "b": [N, r, out]}}`` stacked over the N layers like the base weights.
Each targeted projection computes ``x W + (alpha / r) (x A) B``; ``B`` starts at zero, so the initial
policy is exactly the base model. The base is wrapped in ``stop_gradient`` inside the ``LogitsFn``, and
:func:`lora_optimizer` gives the base a stateless zero update, so optimizer state exists for the
adapters only. The reference policy is the same base with the adapters off
(:func:`reference_params`, ``lora=None``): no second copy of the weights, as d1 does with PEFT's
``disable_adapter``. :data:`LORA_SPLIT` tells the compiled update to return the adapters only (no copy
of the base per step).

Targets and sizes come from ``ModelConfig.lora_rank / lora_alpha / lora_targets``; ``lora_dropout`` drops
each adapter's input on the update's likelihood passes only (:func:`make_lora_logits_fn`'s ``train``).
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from daca_jax.contracts import ModelFns, ParamSplit
from daca_jax.errors import ConfigError
from daca_jax.models.llada import LORA_MODULES, Adapters, Params, model_config
from daca_jax.config.checks import DTYPES
from daca_jax.config.model import ModelConfig


def adapter_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
  """(in, out) of every projection that LoRA can target."""
  d, q, kv, f = cfg.d_model, cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.mlp_dim
  return {"q": (d, q), "k": (d, kv), "v": (d, kv), "o": (q, d), "gate": (d, f), "up": (d, f),
          "down": (f, d)}


def init_lora(cfg: ModelConfig, key: jax.Array) -> Adapters:
  """Fresh adapters for ``cfg.lora_targets``: A ~ N(0, 1/in), B = 0 (so base + LoRA == base).

  Returns:
    ``{target: {"a": [N, in, r], "b": [N, r, out]}}`` in ``cfg.param_dtype``.
  Raises:
    ConfigError: ``model.lora_rank`` is 0 (LoRA not configured) or the config is invalid.
  """
  cfg.validate()
  if cfg.lora_rank <= 0:
    raise ConfigError("model.lora_rank", cfg.lora_rank, "a positive rank to build LoRA adapters")
  dt, r, n = DTYPES[cfg.param_dtype], cfg.lora_rank, cfg.n_layers
  shapes = adapter_shapes(cfg)
  out = {}
  for i, t in enumerate(cfg.lora_target_list):
    fan_in, fan_out = shapes[t]
    a = jax.random.normal(jax.random.fold_in(key, i), (n, fan_in, r), jnp.float32) * fan_in ** -0.5
    out[t] = {"a": a.astype(dt), "b": jnp.zeros((n, r, fan_out), dt)}
  return out


def lora_params(base: Params, adapters: Adapters | None) -> dict[str, Any]:
  """The parameter pytree of a LoRA policy: ``{"base": base, "lora": adapters}``."""
  return {"base": base, "lora": adapters}


# The update changes the adapters only: its compiled step returns them, not a copy of the base.
LORA_SPLIT = ParamSplit(trainable=lambda params: params["lora"],
                        replace=lambda params, adapters: {"base": params["base"], "lora": adapters})


def reference_params(params: dict[str, Any]) -> dict[str, Any]:
  """The reference policy of a LoRA policy: the same base arrays (not copied), adapters off."""
  return {"base": params["base"], "lora": None}


def make_lora_logits_fn(graphdef: nnx.GraphDef, return_hidden: bool = False,
                        logprob_chunk: int = 0, dropout_key: jax.Array | None = None) -> ModelFns:
  """``logits_fn(params, tokens[B, T] int32, positions=None) -> logits [B, T, V] float32`` of a LoRA
  policy, ``params = {"base": nnx.State, "lora": adapters or None}``.

  The base parameters are frozen (``stop_gradient``): gradients reach the adapters only.
  Returned as a :class:`~daca_jax.contracts.ModelFns` (callable as that function); ``return_hidden``
  and ``logprob_chunk`` as in :func:`daca_jax.models.make_logits_fn`. Its model split (``hidden``,
  ``head``) and K/V cache (``lora=True``) apply the adapters too. Its ``train(key)`` is the same policy
  with LoRA dropout (``ModelConfig.lora_dropout``, PEFT's: on each adapter's input) under ``key``,
  which the update's likelihood passes use (:func:`daca_jax.rl.update.make_scores_fn`); ``dropout_key``
  builds that variant directly. Passes with ``lora=None`` (the reference policy) have no dropout.
  """

  def base_model(params: dict[str, Any]) -> nnx.Module:
    return nnx.merge(graphdef, jax.lax.stop_gradient(params["base"]))

  def logits_fn(params: dict[str, Any], tokens: jax.Array, positions: jax.Array | None = None):
    return base_model(params)(tokens, positions, return_hidden=return_hidden, lora=params["lora"],
                              dropout_key=dropout_key)

  def hidden_fn(params: dict[str, Any], tokens: jax.Array, positions: jax.Array | None = None):
    model = base_model(params)
    return model.final_norm(model.residual(tokens, positions, params["lora"], dropout_key))

  def head_fn(params: dict[str, Any], hidden: jax.Array) -> jax.Array:
    return base_model(params).output(hidden)

  def train(key: jax.Array) -> ModelFns:
    return make_lora_logits_fn(graphdef, return_hidden, logprob_chunk, dropout_key=key)

  # lora=True: the K/V-cache rollout must build its LoRA variant (daca_jax.models.kv_cache.kv_fns_for),
  # never run the base without the adapters.
  return ModelFns(logits=logits_fn, hidden=hidden_fn, head=head_fn, logprob_chunk=int(logprob_chunk),
                  config=lambda params: model_config(graphdef, params["base"]), graph=graphdef, lora=True,
                  returns_hidden=return_hidden, train=train if dropout_key is None else None)


def lora_optimizer(inner: optax.GradientTransformation) -> optax.GradientTransformation:
  """Applies ``inner`` to the adapters and a stateless zero update to the base.

  Gradient clipping and weight decay inside ``inner`` therefore see the adapters only, and the optimizer
  state holds nothing of base size.
  """

  def labels(params: dict[str, Any]) -> dict[str, Any]:
    return {"base": jax.tree.map(lambda _: "frozen", params["base"]),
            "lora": jax.tree.map(lambda _: "train", params["lora"])}

  return optax.multi_transform({"train": inner, "frozen": optax.set_to_zero()}, labels)


def merge_lora(base: Params, adapters: Adapters, cfg: ModelConfig) -> Params:
  """Base parameters with ``W + (alpha / r) A B`` folded into every targeted kernel (for export or
  for serving without the adapter matmuls). Returns a new ``nnx.State``; ``base`` is unchanged."""
  scale = cfg.lora_alpha / cfg.lora_rank
  pure = nnx.to_pure_dict(base)
  for t, ab in adapters.items():
    layer = pure["layers"][LORA_MODULES[t]]
    w = layer["kernel"]
    layer["kernel"] = (w.astype(jnp.float32) + scale * jnp.einsum(
        "nir,nro->nio", ab["a"].astype(jnp.float32), ab["b"].astype(jnp.float32))).astype(w.dtype)
  merged = jax.tree.map(lambda x: x, base)
  nnx.replace_by_pure_dict(merged, pure)
  return merged


def trainable_count(adapters: Adapters) -> int:
  """Number of adapter parameters."""
  return sum(int(x.size) for x in jax.tree.leaves(adapters))


__all__ = ["LORA_SPLIT", "adapter_shapes", "init_lora", "lora_params", "reference_params", "make_lora_logits_fn",
           "lora_optimizer", "merge_lora", "trainable_count"]
