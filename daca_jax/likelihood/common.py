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
from daca_jax.contracts import as_model_fns, call_hidden, call_logits, check_shape, shape_of  # noqa: F401


def policy_ids(logits_fn: Any, params: Any, vocab_size: int | None, mask_id: int | None) -> np.ndarray | None:
  """bool [V] ids of the sampler's policy (None = all ids, when ``mask_id`` is None): every id but
  ``mask_id`` below the model's ``vocab_limit`` (``ModelFns.config(params)``, when the
  ``logits_fn`` is model-backed; ``vocab_size`` None takes that config's V).

  Raises:
    ConfigError: ``mask_id`` or the model's ``vocab_limit`` outside the vocabulary.
    ValueError: ``vocab_size`` None and no ``config`` in the ``ModelFns``.
  """
  if mask_id is None:
    return None
  model_cfg = as_model_fns(logits_fn).model_config(params)
  if vocab_size is None:
    if model_cfg is None:
      raise ValueError("a ModelFns scored through its hidden/head split also needs config (params -> "
                       "ModelConfig) for the vocabulary")
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
  Raises:
    ShapeError: ``hidden`` is not ``[B, T, D]`` for ``targets [B, T]``.
  """
  b, t = check_shape("targets", targets, ("B", "T"), "[B, T] target ids")
  check_shape("hidden", hidden, (b, t, "D"), f"[B, T, D]: one hidden state per target of {(b, t)}")
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


def score_targets(logits_fn: Any, params: Any, tokens: jax.Array, targets: jax.Array,
                  start: int, mask_id: int | None = None) -> jax.Array:
  """Log-probs float32 [B, T'] of ``targets`` at positions ``start .. start+T'-1`` of ``tokens``,
  under the sampler's policy when ``mask_id`` is given (:func:`policy_ids`), else over all ids.

  The estimators score through this function, or :func:`score_positions` when a pass needs only
  some positions. A plain ``LogitsFn`` is called once and its logits gathered
  (:func:`token_logprobs`). When ``logits_fn`` is a :class:`~daca_jax.contracts.ModelFns` with the
  model split (``hidden``, ``head``, as :func:`daca_jax.models.make_logits_fn` builds) and
  ``logprob_chunk > 0``, the gather runs chunk by chunk (:func:`chunked_token_logprobs`) and float32
  ``[B, T, V]`` logits never exist at once.

  Raises:
    ShapeError: the model's logits (or hidden states) are not one row per position of ``tokens``.
  """
  fns = as_model_fns(logits_fn)
  if fns.logprob_chunk and fns.has_split:
    ok = policy_ids(fns, params, None, mask_id)  # the model split comes with its config
    hidden = call_hidden(fns, params, tokens)[:, start:start + targets.shape[1]]
    return chunked_token_logprobs(lambda h: fns.head(params, h), hidden, targets, fns.logprob_chunk, ok)
  logits = call_logits(fns, params, tokens)[0][:, start:start + targets.shape[1]]
  return token_logprobs(logits, targets, policy_ids(fns, params, logits.shape[-1], mask_id))


def score_positions(logits_fn: Any, params: Any, tokens: jax.Array, targets: jax.Array,
                    positions: jax.Array, mask_id: int | None = None) -> jax.Array:
  """Log-probs float32 [B, C] of ``targets`` [B, C] at the absolute ``positions`` int32 [B, C] of
  ``tokens`` [B, T], with the output projection and log-softmax run for those C positions only
  (under the sampler's policy when ``mask_id`` is given, as :func:`score_targets`).

  An estimator that needs a few positions per pass (SML reads only its masked stratum: C ≈ L/K) saves
  the ``[B, L, V]`` head and log-softmax of the rest, K-fold in total (V = 126k for LLaDA). With the
  model split of a :class:`~daca_jax.contracts.ModelFns` (``hidden``/``head``, see
  :func:`daca_jax.models.make_logits_fn`) the hidden states are gathered before the projection
  (in chunks of ``logprob_chunk`` when > 0); a plain ``LogitsFn`` computes all logits, then gathers
  before the log-softmax. Equal to ``take_along_axis(token_logprobs(logits, tokens-shaped targets),
  positions)``.

  Raises:
    ShapeError: the model's logits (or hidden states) are not one row per position of ``tokens``.
  """
  fns = as_model_fns(logits_fn)
  gather = jax.vmap(lambda rows, idx: rows[idx])  # [B, T, ...], [B, C] -> [B, C, ...]
  if fns.has_split:
    hidden = gather(call_hidden(fns, params, tokens), positions)  # [B, C, D]
    return chunked_token_logprobs(lambda h: fns.head(params, h), hidden, targets, fns.logprob_chunk,
                                  policy_ids(fns, params, None, mask_id))
  logits = gather(call_logits(fns, params, tokens)[0], positions)
  return token_logprobs(logits, targets, policy_ids(fns, params, logits.shape[-1], mask_id))


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


def check_steps(estimator: str, rows: dict[str, Any], steps: int, passes_field: str, passes: int) -> None:
  """The checks of an estimator that rebuilds rollout states: its Trajectory rows given, S set, and
  at most S passes (``passes_field``, e.g. ``likelihood.rldf.states``).

  Raises:
    ValueError: a row is None, ``steps <= 0``, or ``passes > steps``.
  """
  missing = [name for name, value in rows.items() if value is None]
  if missing:
    raise ValueError(f"rl.likelihood={estimator!r} needs the rollout's {' and '.join(rows)}")
  if steps <= 0:
    raise ValueError("likelihood.trajectory_steps must be set to the rollout's number of steps")
  if passes > steps:
    raise ValueError(f"{passes_field}={passes} must be <= the rollout's steps ({steps})")
