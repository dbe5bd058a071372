"""Likelihood-estimator interface and registry.

Every registry entry has one signature,
``fn(logits_fn, params, tokens[B, P+L], prompt_len, key, cfg: LikelihoodConfig, *, mask_id,
commit_step=None, commit_conf=None, completion_mask=None) -> TokenScores``, and returns
:class:`~daca_jax.contracts.TokenScores`: the log-probs of the completion tokens under ``params`` in
the contexts the estimator scores them in (with ELBO factors for the ELBO-type estimators). It takes a
PRNG key that fixes its masks: the learner passes the **same key** for θ, θ_old and θ_ref within an
inner iteration and a new key per iteration.

An estimator is written with the keyword rows it reads (any of ``commit_step``, ``commit_conf``,
``completion_mask``) and the config fields it reads (keyword-only parameters named after fields of
``LikelihoodConfig``: it sees no other method's options), and may return a ``[B, L]`` log-prob array; :func:`estimator` gives it
the common signature (rows it does not read are accepted and ignored), checks the inputs at trace
time (:func:`check_estimator_inputs`), hands it a :class:`~daca_jax.contracts.ModelFns` and wraps
and checks its output (:func:`~daca_jax.contracts.check_token_scores`).
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable

import jax

from daca_jax.contracts import (TokenScores, as_model_fns, check_completion_rows, check_shape, check_token_scores, check_tokens,
                                token_scores)
from daca_jax.config.checks import _check_fields, _non_negative
from daca_jax.errors import ConfigError
from daca_jax.registry import Registry, check_options, declared_options, registry_from, section_kwargs

# The composed ``likelihood`` section (:class:`~daca_jax.config.likelihood.LikelihoodConfig`), named for annotations, not
# imported: it imports the algorithms' sections, so it sits above them.
LikelihoodSection = Any


LikelihoodFn = Callable[..., TokenScores]
# The keyword-only inputs an estimator may take besides its options: the mask id and the rollout's rows.
ESTIMATOR_INPUTS = ("mask_id", "commit_step", "commit_conf", "completion_mask")


@dataclasses.dataclass(frozen=True)
class EstimatorOptions:
  """The fields of the ``likelihood`` section that any estimator may read besides its own section; their
  defaults are :class:`~daca_jax.config.likelihood.LikelihoodConfig`'s, and its ``validate`` checks them
  here.

  Attributes:
    p_mask_prompt: probability of masking each prompt token in the likelihood passes, in [0, 1).
    strata_batch: passes kept at once by the multi-pass estimators (0: all, vectorised), >= 0.
    trajectory_steps: denoising steps S of the rollouts the trajectory-type estimators rebuild (0:
      ``rollout.steps``), >= 0.
  """

  p_mask_prompt: float = 0.0
  strata_batch: int = 0
  trajectory_steps: int = 0

  def validate(self, prefix: str = "likelihood") -> "EstimatorOptions":
    _check_fields(prefix, self)
    if not 0.0 <= self.p_mask_prompt < 1.0:
      raise ConfigError(f"{prefix}.p_mask_prompt", self.p_mask_prompt, "a probability in [0, 1)")
    _non_negative(prefix, self, "strata_batch", "trajectory_steps")
    return self


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


_RETURNS_NOTE = ("  Registered as ``LIKELIHOOD[{name!r}]``: the call returns :class:`~daca_jax.contracts.TokenScores`\n"
                 "  (``.logp`` float32 [B, C·L]: the array above when C = 1 context per token; estimators that\n"
                 "  score each token in several contexts give C > 1 with ``.mask`` and ``.weight``), checked\n"
                 "  against the rollout's shape.\n")


def estimator(name: str) -> Callable[[Callable[..., Any]], LikelihoodFn]:
  """Decorator making ``fn`` estimator ``name`` with the common signature; it registers nothing (the
  registry ``LIKELIHOOD`` is built from the list :data:`daca_jax.likelihood.ESTIMATORS`, :func:`registry_of`).

  An estimator declares the :class:`~daca_jax.config.likelihood.LikelihoodConfig` fields it reads as keyword-only
  parameters named after them (SML: ``stratified``, ``p_mask_prompt``, ``strata_batch``): fields of
  :class:`EstimatorOptions`, or its own section, defined in its module and given as the default; it gets
  only those (:func:`daca_jax.registry.config_fields`). The registry entry,
  ``entry(logits_fn, params, tokens, prompt_len, key, cfg: LikelihoodConfig, *, mask_id, commit_step=None,
  commit_conf=None, completion_mask=None)``, hands it those fields of ``cfg``; the returned function
  (a direct call) takes them as keywords instead, with the estimator's defaults. Both take every
  keyword row and pass on those the estimator declares, run :func:`check_estimator_inputs`, call the
  estimator with ``logits_fn`` as a :class:`~daca_jax.contracts.ModelFns`
  (:func:`~daca_jax.contracts.as_model_fns`), and return :class:`~daca_jax.contracts.TokenScores`
  (a ``[B, L]`` array result wrapped by :func:`~daca_jax.contracts.token_scores`), checked against
  the rollout's shape.
  """

  def deco(fn: Callable[..., Any]) -> LikelihoodFn:
    declared = frozenset(inspect.signature(fn).parameters)
    reads = declared_options(fn, EstimatorOptions, ESTIMATOR_INPUTS)

    def run(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array, mask_id: int,
            rows: dict[str, jax.Array | None], options: dict[str, Any]) -> TokenScores:
      b, _, length = check_estimator_inputs(tokens, prompt_len, **rows)
      out = fn(as_model_fns(logits_fn), params, tokens, prompt_len, key, mask_id=mask_id,
               **{k: v for k, v in rows.items() if k in declared}, **options)
      if not isinstance(out, TokenScores):
        check_shape(f"likelihood {name!r} output", out, (b, length),
                    "[B, L]: one log-prob per completion position, or a TokenScores")
        out = token_scores(out)
      check_token_scores(out, b, length, f"likelihood {name!r}")
      return out

    @functools.wraps(fn)
    def checked(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array, *,
                mask_id: int, commit_step: jax.Array | None = None, commit_conf: jax.Array | None = None,
                completion_mask: jax.Array | None = None, **options: Any) -> TokenScores:
      check_options(fn, options, fn.__name__, EstimatorOptions)
      rows = {"commit_step": commit_step, "commit_conf": commit_conf, "completion_mask": completion_mask}
      return run(logits_fn, params, tokens, prompt_len, key, mask_id, rows, options)

    def entry(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array,
              cfg: LikelihoodSection, *, mask_id: int, commit_step: jax.Array | None = None,
              commit_conf: jax.Array | None = None, completion_mask: jax.Array | None = None) -> TokenScores:
      rows = {"commit_step": commit_step, "commit_conf": commit_conf, "completion_mask": completion_mask}
      return run(logits_fn, params, tokens, prompt_len, key, mask_id, rows,
                 section_kwargs(cfg, reads))  # cfg is a validated section

    entry.reads = reads  # the LikelihoodConfig fields this estimator sees
    entry.__doc__, entry.__name__, entry.__module__ = fn.__doc__, fn.__name__, fn.__module__
    # What a caller gets is the wrapper's TokenScores, whatever the estimator body returns: say so in
    # the signature and the docstring that help() and the API reference show.
    note = _RETURNS_NOTE.format(name=name)
    for f in (checked, entry):
      f.__annotations__ = {**f.__annotations__, "return": TokenScores}
      f.__doc__ = (fn.__doc__ or "").rstrip() + "\n\n" + note
    checked.estimator_name, checked.entry = name, entry
    return checked

  return deco


def registry_of(estimators: tuple[LikelihoodFn, ...]) -> Registry[LikelihoodFn]:
  """The ``rl.likelihood`` registry of ``estimators`` (functions made by :func:`estimator`), in their order.

  Raises:
    ValueError: two estimators of one name.
  """
  return registry_from("likelihood estimator", "rl.likelihood", ((fn.estimator_name, fn.entry) for fn in estimators))
