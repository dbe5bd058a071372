"""The model contract: a ``LogitsFn`` and the :class:`ModelFns` value that carries what the library
may use beyond it (the hidden/head split, chunked log-prob gathering, the graph for K/V caches).

A user with a model of their own passes a plain function ``logits_fn(params, tokens[B, T]) -> logits
[B, T, V]``; every entry point wraps it with :func:`as_model_fns`. The library's own models
(:func:`daca_jax.models.make_logits_fn`) return a ``ModelFns``, which is itself callable as a
``LogitsFn``, so code that only calls the function never needs to know the difference. Behaviour
travels as fields of one value, never as attributes glued onto a function, so a wrapper cannot drop
part of it silently: :func:`as_model_fns` refuses a plain function that carries such attributes.
"""
from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Callable, Protocol, runtime_checkable

import jax

from daca_jax.contracts.shapes import check_shape, shape_of
from daca_jax.errors import ConfigError, ShapeError


@runtime_checkable
class LogitsFn(Protocol):
  """``logits_fn(params, tokens int32 [B, T]) -> logits float [B, T, V]``: one logit row per input
  position (prompt positions included), pure and jit-able."""

  def __call__(self, params: Any, tokens: jax.Array) -> Any: ...


class HiddenFn(Protocol):
  """``hidden_fn(params, tokens int32 [B, T]) -> hidden [B, T, D]``: the final-norm states."""

  def __call__(self, params: Any, tokens: jax.Array) -> jax.Array: ...


class HeadFn(Protocol):
  """``head_fn(params, hidden [..., D]) -> logits float32 [..., V]``: the output projection only."""

  def __call__(self, params: Any, hidden: jax.Array) -> jax.Array: ...


# Attributes that functions carried before ModelFns existed; a plain function that has one of them would
# silently lose it (the LoRA chunking bug), so as_model_fns refuses it.
LEGACY_ATTRIBUTES = ("hidden_fn", "head_fn", "logprob_chunk", "graphdef", "lora_graphdef", "model_config")


@dataclasses.dataclass(frozen=True, eq=False)
class ModelFns:
  """A model as the library uses it. Callable as its ``logits`` function.

  Attributes:
    logits: the ``LogitsFn``; with ``returns_hidden`` it returns ``(logits [B, T, V], hidden
      [B, T, D])`` instead (DelTA's rollouts record the commit-step hidden states).
    hidden: the model split's first half (:class:`HiddenFn`), or None. With ``head`` it lets the
      sampler project a chunk of positions at a time and the estimators project only the positions
      they score.
    head: the output projection (:class:`HeadFn`), or None; given exactly when ``hidden`` is.
    logprob_chunk: > 0: the estimators gather target log-probs this many positions at a time through
      ``hidden``/``head`` (float32 ``[B, T, V]`` logits never exist at once); needs the split.
    config: ``params -> ModelConfig`` of the graph (the sampler reads ``mask_token_id`` and
      ``vocab_limit``), or None for a foreign model.
    graph: the model's ``nnx.GraphDef`` (:func:`daca_jax.models.kv_cache.kv_fns_for` builds the K/V
      cache functions from it), or None.
    lora: ``graph`` is the base of a LoRA policy (``params = {"base", "lora"}``): the K/V cache and
      the split apply the adapters.
    returns_hidden: ``logits`` returns ``(logits, hidden)``.
    train: ``key -> ModelFns``: the same model for one training pass under a PRNG key (LoRA dropout,
      :func:`daca_jax.models.lora.make_lora_logits_fn`), or None when training passes compute what
      inference passes compute. Only the update's likelihood passes use it (:meth:`for_training`).

  Raises:
    ConfigError: ``logits`` not callable, ``hidden`` without ``head`` (or the reverse), or
      ``logprob_chunk`` negative or > 0 without the split (chunking would silently not happen).
  """

  logits: Callable[..., Any]
  hidden: Callable[..., jax.Array] | None = None
  head: Callable[..., jax.Array] | None = None
  logprob_chunk: int = 0
  config: Callable[[Any], Any] | None = None
  graph: Any = None
  lora: bool = False
  returns_hidden: bool = False
  train: Callable[[jax.Array], "ModelFns"] | None = None

  def __post_init__(self):
    if not callable(self.logits):
      raise ConfigError("ModelFns.logits", type(self.logits).__name__,
                        "a callable (params, tokens[B, T]) -> logits[B, T, V]")
    if (self.hidden is None) != (self.head is None):
      raise ConfigError("ModelFns.head" if self.head is None else "ModelFns.hidden", None,
                        "both hidden and head (the model split) or neither")
    chunk = self.logprob_chunk
    if isinstance(chunk, bool) or not isinstance(chunk, numbers.Integral) or chunk < 0:
      raise ConfigError("ModelFns.logprob_chunk", chunk, "an integer >= 0")
    if chunk and self.hidden is None:
      raise ConfigError("ModelFns.logprob_chunk", chunk, "0 for a model without the hidden/head split "
                        "(chunked gathering projects hidden states chunk by chunk; give hidden and head)")
    object.__setattr__(self, "logprob_chunk", int(chunk))

  def __call__(self, params: Any, tokens: jax.Array, *args: Any, **kwargs: Any) -> Any:
    return self.logits(params, tokens, *args, **kwargs)

  @property
  def has_split(self) -> bool:
    """The model comes with its hidden/head split."""
    return self.hidden is not None

  # The names the split had as function attributes (read by code written against them).
  @property
  def hidden_fn(self) -> Callable[..., jax.Array] | None:
    return self.hidden

  @property
  def head_fn(self) -> Callable[..., jax.Array] | None:
    return self.head

  def for_training(self, key: jax.Array) -> "ModelFns":
    """The model of one training pass under ``key`` (``train(key)``), or itself when it has none."""
    return self if self.train is None else self.train(key)

  def model_config(self, params: Any) -> Any:
    """The graph's ModelConfig, or None for a model without one."""
    return None if self.config is None else self.config(params)


def as_model_fns(fn: Any, name: str = "logits_fn") -> ModelFns:
  """The :class:`ModelFns` of what a user passed: itself, or a plain ``LogitsFn`` wrapped.

  Raises:
    ConfigError: ``fn`` is not callable, or is a plain function carrying one of the attributes
      functions carried before ModelFns (``hidden_fn``, ``logprob_chunk``, ...), which would be
      dropped silently.
  """
  if isinstance(fn, ModelFns):
    return fn
  if not callable(fn):
    raise ConfigError(name, type(fn).__name__, "a callable (params, tokens[B, T]) -> logits[B, T, V] or a "
                      "daca_jax.contracts.ModelFns")
  glued = [a for a in LEGACY_ATTRIBUTES if hasattr(fn, a)]
  if glued:
    raise ConfigError(name, f"<function with attributes {glued}>",
                      "a plain LogitsFn or a daca_jax.contracts.ModelFns carrying those as fields "
                      "(ModelFns(logits=..., hidden=..., head=..., logprob_chunk=...)); attributes on a "
                      "function are not read")
  return ModelFns(logits=fn)


def check_logits(out: Any, tokens: jax.Array, name: str = "logits_fn(params, tokens)",
                 returns_hidden: bool = False) -> tuple[jax.Array, jax.Array | None]:
  """Checks a logits function's output against its input and returns ``(logits, hidden or None)``.

  Args:
    out: ``logits [B, T, V]``, or ``(logits, hidden [B, T, D])`` when ``returns_hidden``.
    tokens: the input, [B, T].
  Raises:
    ShapeError: logits (or hidden) not one row per input position, e.g. ``[B, L, V]`` for a
      ``[B, P+L]`` input (the completion only), which would decode or score the wrong positions.
    ConfigError: ``returns_hidden`` and the output is not a pair.
  """
  b, t = shape_of(tokens)
  if returns_hidden:
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
      raise ConfigError(f"{name} output", type(out).__name__,
                        "a pair (logits [B, T, V], hidden [B, T, D]) when hidden states are recorded")
    logits, hidden = out
    check_shape(f"{name} output hidden", hidden, (b, t, "D"),
                f"[B, T, D]: one hidden state per position of tokens {(b, t)}")
  else:
    if isinstance(out, (tuple, list)):
      raise ConfigError(f"{name} output", "a tuple", "logits [B, T, V] (a function returning (logits, "
                        "hidden) is used only where hidden states are recorded)")
    logits, hidden = out, None
  check_shape(f"{name} output", logits, (b, t, "V"),
              f"[B, T, V]: one logit row per position of tokens {(b, t)}, prompt included")
  return logits, hidden


def call_logits(fns: ModelFns, params: Any, tokens: jax.Array, returns_hidden: bool = False
                ) -> tuple[jax.Array, jax.Array | None]:
  """``fns.logits(params, tokens)`` checked by :func:`check_logits`: ``(logits, hidden or None)``."""
  return check_logits(fns.logits(params, tokens), tokens, returns_hidden=returns_hidden)


def call_hidden(fns: ModelFns, params: Any, tokens: jax.Array) -> jax.Array:
  """``fns.hidden(params, tokens)`` checked to be ``[B, T, D]``."""
  b, t = shape_of(tokens)
  hidden = fns.hidden(params, tokens)
  check_shape("hidden_fn(params, tokens) output", hidden, (b, t, "D"),
              f"[B, T, D]: one hidden state per position of tokens {(b, t)}")
  return hidden


__all__ = ["LogitsFn", "HiddenFn", "HeadFn", "ModelFns", "as_model_fns", "check_logits", "call_logits",
           "call_hidden", "LEGACY_ATTRIBUTES", "ShapeError"]
