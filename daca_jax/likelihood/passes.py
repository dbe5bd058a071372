"""One pass at a time: the per-pass form of a multi-pass likelihood estimator (registry ``PASSES``).

An estimator whose S contexts are independent forward passes (BGPO's Monte-Carlo ELBO samples, SML's
strata, GDPO's quadrature nodes) can also be evaluated one pass at a time: ``PASSES[name]`` holds
``fn(logits_fn, params, tokens, prompt_len, key, cfg: LikelihoodConfig, *, mask_id, pass_index,
commit_step=None, commit_conf=None, completion_mask=None) -> (TokenScores, here)`` — the estimator's
whole output under the same key (the same masks, mask and weight of every context) with ``logp`` zero
outside the targets that pass ``pass_index`` (an int32 scalar, traced) scores, whose single forward
pass it runs, and ``here`` bool [B, S·L] marking those targets (a context of the ELBO's samples, a
stratum of SML's single context) — and ``num_passes(cfg: LikelihoodConfig) -> S``. :mod:`daca_jax.rl.pass_accum` differentiates an objective
that is a sum of per-pass terms one pass at a time through it, in memory constant in S.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, NamedTuple

import jax

from daca_jax.contracts import TokenScores, as_model_fns, check_token_scores
from daca_jax.likelihood.base import ESTIMATOR_INPUTS, EstimatorOptions, LikelihoodSection, check_estimator_inputs
from daca_jax.registry import declared_options, section_kwargs



class PassForm(NamedTuple):
  """The per-pass form of estimator ``name``: ``run`` (the entry described in the module docstring)
  and ``num_passes(cfg: LikelihoodConfig) -> S``."""

  run: Callable[..., tuple[TokenScores, jax.Array]]
  num_passes: Callable[[LikelihoodSection], int]


def per_pass(name: str, num_passes: Callable[[LikelihoodSection], int]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
  """Decorator making ``fn(logits_fn, params, tokens, prompt_len, key, *, mask_id, pass_index,
  <rows it reads>, <LikelihoodConfig fields it reads>) -> (TokenScores, here)`` the per-pass form of estimator
  ``name`` (the entry hands it its config fields, as :func:`daca_jax.likelihood.base.estimator` does, and
  checks inputs and output). Returns ``fn`` with ``pass_form`` (a :class:`PassForm`) and ``estimator_name``;
  ``PASSES`` is built from the list :data:`daca_jax.likelihood.PER_PASS` (:func:`passes_of`)."""

  def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
    declared = frozenset(inspect.signature(fn).parameters)
    reads = declared_options(fn, EstimatorOptions, (*ESTIMATOR_INPUTS, "pass_index"))

    def run(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array,
            cfg: LikelihoodSection, *, mask_id: int, pass_index: jax.Array, commit_step: jax.Array | None = None,
            commit_conf: jax.Array | None = None,
            completion_mask: jax.Array | None = None) -> tuple[TokenScores, jax.Array]:
      rows = {"commit_step": commit_step, "commit_conf": commit_conf, "completion_mask": completion_mask}
      b, _, length = check_estimator_inputs(tokens, prompt_len, **rows)
      out, here = fn(as_model_fns(logits_fn), params, tokens, prompt_len, key, mask_id=mask_id, pass_index=pass_index,
               **{k: v for k, v in rows.items() if k in declared}, **section_kwargs(cfg, reads))
      check_token_scores(out, b, length, f"likelihood {name!r} (one pass)")
      return out, here

    run.reads = reads
    fn.pass_form, fn.estimator_name = PassForm(run, num_passes), name
    return fn

  return deco


def passes_of(forms: tuple[Callable[..., Any], ...]) -> dict[str, PassForm]:
  """``{estimator name: PassForm}`` of the per-pass forms ``forms`` (functions made by :func:`per_pass`).

  Raises:
    ValueError: two forms of one estimator.
  """
  out: dict[str, PassForm] = {}
  for fn in forms:
    if fn.estimator_name in out:
      raise ValueError(f"two per-pass forms of estimator {fn.estimator_name!r}")
    out[fn.estimator_name] = fn.pass_form
  return out


__all__ = ["PassForm", "passes_of", "per_pass"]
