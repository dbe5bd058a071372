"""What every likelihood estimator returns: :class:`TokenScores`, and how an objective reads it.

An estimator scores the completion tokens of a rollout in S *contexts* (S = 1 for mean-field, SML and
the trajectory likelihood, whose every token is scored once; S = k rebuilt states for RLDF; S = n
quadrature nodes for the ELBO; 2 or 3 passes for coupled sampling). Every (context, position) pair is
a *target*, flattened context-major so that token-level objectives apply unchanged:
``logp[:, j·L + i]`` is ``log p_θ(o_i | context_j)``.

Two kinds:

* ``"logprob"``: each target is a log-probability whose ratio ``exp(logp − logp_old)`` and KL are
  those of a real conditional (no ``weight``).
* ``"elbo"``: each target also carries an ELBO factor (``weight``: ``1/t`` of its pass, times the
  quadrature weight), and a token's *contribution* ``Σ_j weight·mask·logp`` is its term of the
  sequence's evidence lower bound, which is not a log-probability: exponentiating it (as DiffuCoder's
  coupled-GRPO and a token-level ratio over GDPO's ELBO do) scales a log-ratio by ``1/t`` and makes the
  k3 KL blow up where the policy moved. :func:`objective_inputs` therefore hands an objective the
  targets' own log-probs with the factor moved onto the advantage weight (``elbo_terms="per_target"``:
  the same gradient as the summed form at θ = θ_old, with a real ratio to clip and a real KL), or, to
  reproduce the reference implementations, the summed contribution as if it were a log-prob
  (``elbo_terms="summed"``).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from daca_jax.contracts.pytree import field, pytree_dataclass
from daca_jax.contracts.shapes import check_optional_shape, check_shape
from daca_jax.errors import ConfigError, ShapeError

SCORE_KINDS = ("logprob", "elbo")
ELBO_TERMS = ("per_target", "summed")


@pytree_dataclass
class TokenScores:
  """Per-target log-probs of a rollout's completion tokens (the output of every estimator).

  Attributes:
    logp: float32 [B, S·L] ``log p_θ(o_i | context_j)`` at index ``j·L + i``.
    mask: float32 [B, S·L] 1 where (j, i) is a target (scored in context j), else 0.
    weight: float32 [B, S·L] ELBO factor of each target (kind ``"elbo"``), or None (kind ``"logprob"``:
      every target counts once).
    committed_here: float32 [B, S·L] 1 where position i was committed at the rollout state that
      context j rebuilds (RLDF), or None.
    states: int32 [B, S] the rollout steps the contexts rebuild (RLDF), or None.
    num_states: S (static).
    kind: ``"logprob"`` or ``"elbo"`` (static).
  """

  logp: jax.Array
  mask: jax.Array
  weight: jax.Array | None = None
  committed_here: jax.Array | None = None
  states: jax.Array | None = None
  num_states: int = field(static=True, default=1)
  kind: str = field(static=True, default="logprob")

  @property
  def length(self) -> int:
    """L, the completion length."""
    return self.logp.shape[-1] // self.num_states

  def contributions(self) -> jax.Array:
    """float32 [B, L] each token's summed term ``Σ_j weight·mask·logp`` (kind ``"logprob"`` with S = 1
    and a full mask: ``logp`` itself). For ``"elbo"`` the row sum is the sequence ELBO estimate."""
    b = self.logp.shape[0]
    w = self.mask if self.weight is None else self.mask * self.weight
    return jnp.sum((w * self.logp).reshape(b, self.num_states, self.length), axis=1)


def token_scores(logp: jax.Array) -> TokenScores:
  """A ``[B, L]`` log-prob array as :class:`TokenScores` (S = 1, every position a target)."""
  return TokenScores(logp=logp, mask=jnp.ones(logp.shape, jnp.float32))


def check_token_scores(scores: TokenScores, batch: int, length: int, name: str = "estimator") -> None:
  """Checks an estimator's output against its rollout (trace time).

  Raises:
    ShapeError: ``scores`` is not a TokenScores, or a field is not ``[B, S·L]`` (``states`` ``[B, S]``).
    ConfigError: ``kind`` unknown, or ``weight`` given for kind ``"logprob"`` / missing for ``"elbo"``.
  """
  if not isinstance(scores, TokenScores):
    raise ShapeError(f"{name} output", getattr(scores, "shape", type(scores).__name__),
                     "a TokenScores (daca_jax.contracts.token_scores(logp) wraps a [B, L] log-prob array)")
  if scores.kind not in SCORE_KINDS:
    raise ConfigError(f"{name} output kind", scores.kind, f"one of {list(SCORE_KINDS)}")
  if (scores.weight is None) != (scores.kind == "logprob"):
    raise ConfigError(f"{name} output kind", scores.kind,
                      "'elbo' with a weight, or 'logprob' without one")
  s = scores.num_states
  want = (batch, s * length)
  expect = f"[B, S·L] = {want}: {s} context(s) × L={length} positions"
  check_shape(f"{name} output logp", scores.logp, want, expect)
  check_shape(f"{name} output mask", scores.mask, want, expect)
  for attr in ("weight", "committed_here"):
    check_optional_shape(f"{name} output {attr}", getattr(scores, attr), want, expect)
  check_optional_shape(f"{name} output states", scores.states, (batch, s), f"[B, S] = {(batch, s)}")


def objective_inputs(scores: TokenScores, completion_mask: jax.Array, weights: jax.Array,
                     token_advantages: jax.Array | None = None, elbo_terms: str = "per_target"):
  """What a token-level objective reads from an estimator's output.

  Args:
    scores: the estimator's :class:`TokenScores` (S contexts of L positions).
    completion_mask: float32 [B, L] (1 up to and including the first EOS).
    weights: float32 [B, L] credit weights.
    token_advantages: float32 [B, L] or None.
    elbo_terms: ``"per_target"`` (kind ``"elbo"``: each target's log-prob, its ELBO factor multiplied
      into the weights and token advantages) or ``"summed"`` (the token's contribution
      :meth:`TokenScores.contributions` used as its log-prob, as DiffuCoder's coupled-GRPO does).
  Returns:
    (logp [B, L'], mask [B, L'], weights [B, L'], commit_now [B, L'] or None, token advantages
    [B, L'] or None), L' = S·L (L for ``"summed"``): the inputs of :class:`PolicyBatch`.
  Raises:
    ConfigError: ``elbo_terms`` unknown.
  """
  if elbo_terms not in ELBO_TERMS:
    raise ConfigError("likelihood.elbo_terms", elbo_terms, f"one of {list(ELBO_TERMS)}")
  if scores.kind == "elbo" and elbo_terms == "summed":
    return scores.contributions(), completion_mask, weights, None, token_advantages
  reps = (1, scores.num_states)
  mask = jnp.tile(completion_mask, reps) * scores.mask
  w = jnp.tile(weights, reps)
  tok = None if token_advantages is None else jnp.tile(token_advantages, reps)
  if scores.weight is not None:
    w = w * scores.weight
    tok = None if tok is None else tok * scores.weight
  return scores.logp, mask, w, scores.committed_here, tok


def objective_states(scores: TokenScores, elbo_terms: str = "per_target") -> int:
  """S of the targets :func:`objective_inputs` hands an objective (``PolicyBatch.num_states``): the
  estimator's contexts, or 1 where ``"summed"`` folds an ELBO estimator's contexts into each token."""
  return 1 if scores.kind == "elbo" and elbo_terms == "summed" else scores.num_states


__all__ = ["ELBO_TERMS", "SCORE_KINDS", "TokenScores", "check_token_scores", "objective_inputs",
           "objective_states", "token_scores"]
