"""Helpers shared by the likelihood estimators: target log-probs (whole or chunked), prompt masking.

The estimators score tokens under the policy the sampler draws from: the softmax over the
*proposable* ids (:func:`daca_jax.diffusion.proposals.proposable_ids`: never ``[MASK]``, never an id
at or above the model's ``vocab_limit``). Ratios, KL and the trajectory likelihood's "the sampler's
own conditional" are then about the same distribution. (d1's ``get_per_token_logps`` normalises over
the whole vocabulary; its sampler can also commit ``[MASK]``. On a trained model the mask id's
probability is ~0 and the two agree; on random models they differ.)
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.diffusion import proposals
from daca_jax.diffusion.logprob import token_logprobs  # noqa: F401  (re-exported: the estimators' helper)


def policy_ids(logits_fn: Any, params: Any, vocab_size: int | None, mask_id: int | None) -> np.ndarray | None:
  """bool [V] ids of the sampler's policy (None = all ids, when ``mask_id`` is None): every id but
  ``mask_id`` below the model's ``vocab_limit`` (``logits_fn.model_config(params)``, when the
  ``logits_fn`` is model-backed; ``vocab_size`` None takes that config's V).

  Raises:
    ConfigError: ``mask_id`` or the model's ``vocab_limit`` outside the vocabulary.
    ValueError: ``vocab_size`` None and no ``model_config`` on ``logits_fn``.
  """
  if mask_id is None:
    return None
  model_cfg = logits_fn.model_config(params) if hasattr(logits_fn, "model_config") else None
  if vocab_size is None:
    if model_cfg is None:
      raise ValueError("a logits_fn with a model split (hidden_fn/head_fn) also needs model_config(params)")
    vocab_size = model_cfg.vocab_size
  return proposals.proposable_ids(vocab_size, mask_id, model_cfg.vocab_limit if model_cfg is not None else 0)


def chunked_token_logprobs(head_fn: Callable[[jax.Array], jax.Array], hidden: jax.Array,
                           targets: jax.Array, chunk_size: int, ok: np.ndarray | None = None) -> jax.Array:
  """Target log-probs from hidden states, ``chunk_size`` positions at a time.

  Equal to ``token_logprobs(head_fn(hidden), targets)``, but the float32 logits exist for one chunk
  of positions at a time: a ``lax.map`` over chunks whose body (output projection, logsumexp and the
  target gather) is rematerialised, so the backward pass also keeps only ``hidden``, never
  ``[B, T, V]`` (V = 126k for LLaDA).

  Args:
    head_fn: ``hidden [B, C, D] -> logits [B, C, V]`` (e.g. a closure over
      :func:`daca_jax.models.make_head_fn`); may close over parameters being differentiated.
    hidden: [B, T, D] final-norm hidden states.
    targets: int [B, T] target ids.
    chunk_size: positions per chunk; ``<= 0`` or ``>= T`` scores everything in one pass. T need not
      be a multiple (the last chunk is padded, and the padding is dropped).
    ok: optional bool [V] ids to normalise over (:func:`token_logprobs`).
  Returns:
    float32 [B, T].
  """
  b, t = targets.shape
  if chunk_size <= 0 or chunk_size >= t:
    return token_logprobs(head_fn(hidden), targets, ok)
  pad = -t % chunk_size
  n = (t + pad) // chunk_size
  h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, n, chunk_size, hidden.shape[-1])
  y = jnp.pad(targets, ((0, 0), (0, pad))).reshape(b, n, chunk_size)
  body = jax.checkpoint(lambda xs: token_logprobs(head_fn(xs[0]), xs[1], ok))
  out = jax.lax.map(body, (h.swapaxes(0, 1), y.swapaxes(0, 1)))  # [n, B, C]
  return out.swapaxes(0, 1).reshape(b, n * chunk_size)[:, :t]


def make_target_logprob_fn(hidden_fn: Callable[..., jax.Array], head_fn: Callable[..., jax.Array],
                           chunk_size: int, ok: np.ndarray | None = None) -> Callable[..., jax.Array]:
  """``fn(params, tokens[B, T], targets[B, T'], start=0) -> logp [B, T']`` float32: the log-prob of
  ``targets`` at positions ``start .. start+T'-1`` of ``tokens``, gathered in chunks of ``chunk_size``.

  ``hidden_fn(params, tokens) -> [B, T, D]`` and ``head_fn(params, hidden) -> logits`` are the model
  split (:func:`daca_jax.models.make_hidden_fn` / :func:`daca_jax.models.make_head_fn`); ``start`` is
  static (typically the prompt length). Equal to
  ``token_logprobs(logits_fn(params, tokens)[:, start:start+T'], targets)``.
  """

  def fn(params, tokens: jax.Array, targets: jax.Array, start: int = 0) -> jax.Array:
    hidden = hidden_fn(params, tokens)[:, start:start + targets.shape[1]]
    return chunked_token_logprobs(lambda h: head_fn(params, h), hidden, targets, chunk_size, ok)

  return fn


def score_targets(logits_fn: Callable[..., Any], params: Any, tokens: jax.Array, targets: jax.Array,
                  start: int, mask_id: int | None = None) -> jax.Array:
  """Log-probs float32 [B, T'] of ``targets`` at positions ``start .. start+T'-1`` of ``tokens``,
  under the sampler's policy when ``mask_id`` is given (:func:`policy_ids`), else over all ids.

  The estimators score through this function, or :func:`score_positions` when a pass needs only
  some positions. A plain ``LogitsFn`` is called once and its logits gathered
  (:func:`token_logprobs`). When ``logits_fn`` carries its model split (``hidden_fn``, ``head_fn``
  attributes, as :func:`daca_jax.models.make_logits_fn` attaches) and ``logprob_chunk > 0``, the
  gather runs chunk by chunk (:func:`chunked_token_logprobs`) and float32 ``[B, T, V]`` logits never
  exist at once.
  """
  chunk = getattr(logits_fn, "logprob_chunk", 0)
  if chunk and getattr(logits_fn, "hidden_fn", None) is not None:
    ok = policy_ids(logits_fn, params, None, mask_id)  # the model split comes with its config
    return make_target_logprob_fn(logits_fn.hidden_fn, logits_fn.head_fn, chunk, ok)(params, tokens, targets, start)
  logits = logits_fn(params, tokens)[:, start:start + targets.shape[1]]
  return token_logprobs(logits, targets, policy_ids(logits_fn, params, logits.shape[-1], mask_id))


def score_positions(logits_fn: Callable[..., Any], params: Any, tokens: jax.Array, targets: jax.Array,
                    positions: jax.Array, mask_id: int | None = None) -> jax.Array:
  """Log-probs float32 [B, C] of ``targets`` [B, C] at the absolute ``positions`` int32 [B, C] of
  ``tokens`` [B, T], with the output projection and log-softmax run for those C positions only
  (under the sampler's policy when ``mask_id`` is given, as :func:`score_targets`).

  An estimator that needs a few positions per pass (SML reads only its masked stratum: C ≈ L/K) saves
  the ``[B, L, V]`` head and log-softmax of the rest, K-fold in total (V = 126k for LLaDA). With the
  model split attached to ``logits_fn`` (``hidden_fn``/``head_fn``, see
  :func:`daca_jax.models.make_logits_fn`) the hidden states are gathered before the projection
  (in chunks of ``logprob_chunk`` when > 0); a plain ``LogitsFn`` computes all logits, then gathers
  before the log-softmax. Equal to ``take_along_axis(token_logprobs(logits, tokens-shaped targets),
  positions)``.
  """
  gather = jax.vmap(lambda rows, idx: rows[idx])  # [B, T, ...], [B, C] -> [B, C, ...]
  hidden_fn = getattr(logits_fn, "hidden_fn", None)
  if hidden_fn is not None:
    hidden = gather(hidden_fn(params, tokens), positions)  # [B, C, D]
    chunk = getattr(logits_fn, "logprob_chunk", 0)
    return chunked_token_logprobs(lambda h: logits_fn.head_fn(params, h), hidden, targets, chunk,
                                  policy_ids(logits_fn, params, None, mask_id))
  logits = gather(logits_fn(params, tokens), positions)
  return token_logprobs(logits, targets, policy_ids(logits_fn, params, logits.shape[-1], mask_id))


def mask_prompt(key: jax.Array, prompt: jax.Array, p_mask_prompt: float, mask_id: int) -> jax.Array:
  """Masks each prompt token independently with probability ``p_mask_prompt`` (d1's prompt masking).

  Args:
    prompt: int32 [B, P].
  Returns:
    int32 [B, P]; unchanged when ``p_mask_prompt == 0`` (static).
  """
  if p_mask_prompt <= 0.0:
    return prompt
  hit = jax.random.uniform(key, prompt.shape) < p_mask_prompt
  return jnp.where(hit, mask_id, prompt)
