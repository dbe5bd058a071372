"""Likelihood-estimator interface and registry.

An estimator returns per-token log-probabilities ``logp [B, L] float32`` of a rollout's completion
tokens under ``params``. It takes a PRNG key that fixes its masks: the learner passes the **same key**
for θ, θ_old and θ_ref within an inner iteration and a new key per iteration.

Signature: ``fn(logits_fn, params, tokens[B, P+L], prompt_len, key, cfg, *, mask_id, commit_step=None)``.
Estimators are registered with :func:`register_estimator`, which checks these inputs at trace time
(:func:`check_estimator_inputs`) and hands the estimator a :class:`~daca_jax.contracts.ModelFns`.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import jax

from daca_jax.contracts import as_model_fns, check_completion_rows, check_tokens
from daca_jax.registry import Registry

LikelihoodFn = Callable[..., jax.Array]
LIKELIHOOD: Registry[LikelihoodFn] = Registry("likelihood estimator", "rl.likelihood")


def split_key(key: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(prompt-mask key, estimator key): shared by all estimators so that, e.g., SML with K = 1 and
  mean-field draw the same prompt mask from the same key."""
  k_prompt, k_est = jax.random.split(key)
  return k_prompt, k_est




# Per-completion-position inputs an estimator may take, and what they hold (for the messages).
_ROW_INPUTS = {"commit_step": "the rollout's commit step of each completion position",
               "commit_conf": "the rollout's commit confidence of each completion position",
               "completion_mask": "the completion mask"}


def check_estimator_inputs(tokens: jax.Array, prompt_len: Any, **rows: Any) -> tuple[int, int, int]:
  """Checks an estimator's inputs (trace time).

  Args:
    tokens: int [B, P+L] rollout sequences.
    prompt_len: P, a static int in ``[0, P+L-1]``.
    **rows: ``commit_step`` / ``commit_conf`` / ``completion_mask`` (each [B, L] or None).
  Returns:
    (B, P, L).
  Raises:
    ShapeError: ``tokens`` not an integer ``[B, P+L]`` array, or a row input not ``[B, L]`` with
      ``L = P+L - prompt_len`` (the message names the prompt length that would fit).
    ConfigError: ``prompt_len`` not a static int in range.
  """
  b, p, length = check_tokens(tokens, prompt_len)
  for name, value in rows.items():
    check_completion_rows(name, value, b, p, length, _ROW_INPUTS.get(name, "one entry per completion position"))
  return b, p, length


def register_estimator(name: str) -> Callable[[LikelihoodFn], LikelihoodFn]:
  """Decorator registering an estimator as ``LIKELIHOOD[name]``, with its inputs checked.

  The registered (and returned) function binds its arguments as the estimator's signature, runs
  :func:`check_estimator_inputs` and calls the estimator with ``logits_fn`` as a
  :class:`~daca_jax.contracts.ModelFns` (:func:`~daca_jax.contracts.as_model_fns`). Its
  ``inspect.signature`` is the estimator's.
  """

  def deco(fn: LikelihoodFn) -> LikelihoodFn:
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
      bound = sig.bind(*args, **kwargs)
      a = bound.arguments
      check_estimator_inputs(a["tokens"], a["prompt_len"],
                             **{k: a[k] for k in _ROW_INPUTS if k in a})
      a["logits_fn"] = as_model_fns(a["logits_fn"])
      return fn(*bound.args, **bound.kwargs)

    LIKELIHOOD.register(name)(checked)
    return checked

  return deco
