"""The exact expected reward of the library's sampler on an enumerable toy, and so its exact gradient.

Over an alphabet of V letters and completions of length L (V^L of them), the probability that the
rollout (:func:`daca_jax.diffusion.make_rollout_fn`: one block, one token committed per step,
temperature 1, logits restricted to the alphabet by :func:`restrict_logits`) produces a completion is a
sum over the L! generation orders, computed by dynamic programming over the 2^L sets of revealed
positions (:func:`sampler_logprob`); :func:`expected_reward` is differentiable with ``jax.grad``.
:mod:`daca_jax.studies.gradient_study` (which re-exports these names) explains the two remasking rules.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

# Logit given to ids outside the alphabet: finite, so that entropies stay finite (0 · -inf is NaN).
_EXCLUDED_LOGIT = -1e9
# Floor of the log-probability of an impossible step (keeps gradients finite; e^-1e4 is 0).
_LOG_FLOOR = -1e4


def restrict_logits(logits_fn: Callable[..., Any], allowed_ids: Sequence[int],
                    return_hidden: bool = False) -> Callable[..., Any]:
  """A logits function whose distribution is the model's renormalised over ``allowed_ids``.

  Args:
    logits_fn: ``(params, tokens [B, T]) -> logits [B, T, V]`` (or ``(logits, hidden)`` when
      ``return_hidden``).
    allowed_ids: the ids the sampler may propose.
  Returns:
    The same signature; every other id gets a logit of -1e9.
  """
  allowed = np.asarray(sorted(set(int(i) for i in allowed_ids)), np.int32)

  def fn(params: Any, tokens: jax.Array) -> Any:
    out = logits_fn(params, tokens)
    logits, hidden = out if return_hidden else (out, None)
    mask = jnp.zeros((logits.shape[-1],), bool).at[allowed].set(True)
    logits = jnp.where(mask, logits.astype(jnp.float32), _EXCLUDED_LOGIT)
    return (logits, hidden) if return_hidden else logits

  return fn


def _safe_log(x: jax.Array) -> jax.Array:
  """log x, with log 0 = -1e4 and a zero gradient there (the double-where trick)."""
  pos = x > 0
  return jnp.where(pos, jnp.log(jnp.where(pos, x, 1.0)), _LOG_FLOOR)


def step_logprobs(probs: jax.Array, completion: jax.Array, masked: jax.Array, remasking: str) -> jax.Array:
  """log P(the step commits token ``completion_j`` at position j) for every masked position j.

  Args:
    probs: float32 [B, L, V] the model's distributions at every completion position in this state.
    completion: int32 [B, L] the completion being scored.
    masked: bool [B, L] positions still masked in this state.
    remasking: "random" or "low_confidence" (one token committed per step, temperature 1).
  Returns:
    float32 [B, L]; meaningless where ``masked`` is False.
  Raises:
    ValueError: another remasking rule.
  """
  own = jnp.take_along_axis(probs, completion[..., None], -1)[..., 0]  # [B, L]: p_j(o_j)
  if remasking == "random":
    n = jnp.sum(masked, -1, keepdims=True).astype(jnp.float32)
    return _safe_log(own) - jnp.log(jnp.maximum(n, 1.0))
  if remasking != "low_confidence":
    raise ValueError(f"rollout.remasking={remasking!r}: the exact sampler probability is defined for "
                     "'random' and 'low_confidence'")
  length = completion.shape[1]
  j = jnp.arange(length)
  c = own[:, :, None, None]  # [B, j, 1, 1] the winning candidate's probability
  pk = probs[:, None, :, :]  # [B, 1, k, V]
  later = (j[None, :] > j[:, None])[None, :, :, None]  # [1, j, k, 1]: k > j loses ties to j
  below = (pk < c) | ((pk == c) & later)
  f = jnp.sum(pk * below, -1)  # [B, j, k]: P(x0_k's probability loses to c)
  others = masked[:, None, :] & (j[:, None] != j[None, :])[None]  # [B, j, k]
  return _safe_log(own) + jnp.sum(jnp.where(others, _safe_log(f), 0.0), -1)


def sampler_logprob(logits_fn: Callable[..., jax.Array], params: Any, prompts: jax.Array,
                    completions: jax.Array, *, mask_id: int, remasking: str) -> jax.Array:
  """Exact log-probability that the one-token-per-step sampler produces each completion.

  The sampler is :func:`daca_jax.diffusion.make_rollout_fn` with ``block_length = steps =
  gen_length = L`` and temperature 1 over ``logits_fn``. Dynamic programming over revealed sets:
  ``F(∅) = 1``, ``F(S ∪ {j}) += F(S) · P_t(j, o_j | S)``; ``log p(o) = log F(all)``.

  Args:
    logits_fn: pure ``(params, tokens [B, P+L]) -> logits [B, P+L, V]`` (e.g. restricted to an
      alphabet with :func:`restrict_logits`).
    prompts: int32 [B, P]; completions: int32 [B, L] with L <= 12.
    mask_id: ``[MASK]`` id; remasking: "random" or "low_confidence".
  Returns:
    float32 [B]; differentiable in ``params``.
  Raises:
    ValueError: L > 12, or an unsupported remasking rule.
  """
  b, length = completions.shape
  if length > 12:
    raise ValueError(f"the exact sampler probability needs L <= 12 (2^L forward passes), got L={length}")
  n_sets = 1 << length
  bits = jnp.asarray((np.arange(n_sets)[:, None] >> np.arange(length)[None, :]) & 1, bool)  # [2^L, L]

  def at_set(vis: jax.Array) -> jax.Array:  # [L] revealed -> [B, L] log P(commit j next)
    x = jnp.concatenate([prompts, jnp.where(vis[None, :], completions, mask_id)], axis=1)
    logits = logits_fn(params, x)[:, prompts.shape[1]:].astype(jnp.float32)
    probs = jax.nn.softmax(logits, axis=-1)
    return step_logprobs(probs, completions, jnp.broadcast_to(~vis, (b, length)), remasking)

  lp = jax.vmap(at_set)(bits)  # [2^L, B, L]
  log_f: list[Any] = [None] * n_sets
  log_f[0] = jnp.zeros((b,), jnp.float32)
  for s in sorted(range(1, n_sets), key=lambda m: bin(m).count("1")):
    terms = [log_f[s ^ (1 << i)] + lp[s ^ (1 << i), :, i] for i in range(length) if s >> i & 1]
    log_f[s] = jax.nn.logsumexp(jnp.stack(terms), axis=0)
  return log_f[n_sets - 1]


def all_completions(alphabet_ids: Sequence[int], length: int) -> np.ndarray:
  """int32 [V^L, L]: every completion over the alphabet, in lexicographic order."""
  return np.asarray(list(itertools.product(alphabet_ids, repeat=length)), np.int32)


def completion_distribution(logits_fn: Callable[..., jax.Array], params: Any, prompt_ids: jax.Array,
                            comps: jax.Array, *, mask_id: int, remasking: str) -> jax.Array:
  """float32 [Q, V^L]: the sampler's probability of every completion for each of the Q prompts."""
  q, n = prompt_ids.shape[0], comps.shape[0]
  lp = sampler_logprob(logits_fn, params, jnp.repeat(prompt_ids, n, 0), jnp.tile(comps, (q, 1)),
                       mask_id=mask_id, remasking=remasking)
  return jnp.exp(lp).reshape(q, n)


def expected_reward(logits_fn: Callable[..., jax.Array], params: Any, prompt_ids: jax.Array,
                    comps: jax.Array, rewards: jax.Array, *, mask_id: int, remasking: str,
                    ref_params: Any = None, beta: float = 0.0) -> jax.Array:
  """``J(θ) = mean_q Σ_o p_θ(o|q) R(q, o)`` (minus ``β · mean_q KL(p_θ(·|q) || p_ref(·|q))`` when
  ``beta > 0``), exactly.

  Args:
    prompt_ids: int32 [Q, P]; comps: int32 [N, L] every completion; rewards: float32 [Q, N].
    ref_params: the reference policy of the KL term (needed when ``beta > 0``).
  Returns:
    float32 scalar.
  """
  p = completion_distribution(logits_fn, params, prompt_ids, comps, mask_id=mask_id, remasking=remasking)
  j = jnp.mean(jnp.sum(p * rewards, -1))
  if beta > 0:
    p_ref = jax.lax.stop_gradient(completion_distribution(logits_fn, ref_params, prompt_ids, comps,
                                                          mask_id=mask_id, remasking=remasking))
    kl = jnp.sum(p * (_safe_log(p) - _safe_log(p_ref)), -1)
    j = j - beta * jnp.mean(kl)
  return j
