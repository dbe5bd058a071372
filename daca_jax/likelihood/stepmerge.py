"""StepMerge trajectory likelihood (d2, kuleshov-group/d2) with Mask-Aware Policy Gradient's
unmasking-position term (MAP, Haran71/mask-aware-policy-gradients).

The S denoising steps are split into N segments of consecutive steps (segment g starts at step
``⌊g S / N⌋``: d2 ``diffu-grpo/diffu_grpo_trainer.py`` ``d2StepMergeTrainer.generate`` keeps the state
after ``int(k * (steps / N))`` steps and marks the tokens committed until the next one). Segment g is
one forward pass on the rollout state before its first step,
``x_g = [MASK] where commit_step >= start_g, else the final token``. In that pass every token
committed in the segment is scored (MAP ``map/trainer.py`` ``DiffuGRPOTrainer._get_per_token_logps_stepmerge``):

* token term: ``log π_θ(o_i | x_g)``, the sampler's policy (softmax over the proposable ids);
* position term (``stepmerge.position``; MAP ``map/position_likelihood.py``
  ``compute_position_logprobs_for_block``): with c_i the token's confidence (``position_source="gt"``:
  the logit, or with ``top_prob`` the probability, of the committed token; ``"max"``: as its
  competitors') and a_j the competitors' confidence (``position_confidence``: the max logit or the top
  probability at j), over the competitors C_i (``position_scope="segment"``: positions committed in
  later segments; ``"position"``: also later steps of i's own segment),
  ``softmax``: ``c_i/τ − log(e^{c_i/τ} + Σ_{j∈C_i} e^{a_j/τ})`` — a Plackett–Luce choice of i among
  the positions still to be unmasked — or ``bradley_terry``: ``Σ_{j∈C_i} log σ((c_i − a_j)/τ)``.

Each update scores K sampled segments (``stepmerge.sample``; 0: all N), drawn per row among the
segments holding a valid token; per-row draws keep rows independent for gradient accumulation. MAP
samples K per batch among segments valid in any row (``_generate_and_score_completions``; its recipes'
batch is one row per device) under a seed that every device shares, so there rows with the same valid
segments score the same ones: the same distribution per row, correlated across rows. Each inner update
draws anew under its own key, as MAP draws per iteration.
Tokens of the other segments are not targets (mask 0). The output has S = 2 contexts with
``position`` (``logp[:, :L]`` token terms, ``logp[:, L:]`` position terms, both masked by the sampled
segments) for the objective ``map``, S = 1 without.

Conventions (where the references differ): MAP's recorded ``unmask_steps`` count from 0 and its
segment n covers ``(n·T/N, (n+1)·T/N]`` in the state after step ``n·T/N``, so tokens committed at
step 0 are never scored and its last segment has T/N − 1 steps; by default (``segment_convention="d2"``),
as in d2, segment g covers ``[start_g, start_{g+1})`` in the state before ``start_g`` — when N divides S,
MAP's computation with ``unmask_steps = commit_step + 1``. ``segment_convention="map"`` is MAP's computation
with ``unmask_steps = commit_step`` and MAP's segments of ⌊S/N⌋ steps: the library's with every commit step
one lower. The step-0 tokens fall in no segment (never targets, never masked, never competitors); when N does
not divide S, neither do those after step N·⌊S/N⌋, which stay masked and compete in every segment's position
term. The oracle tests transcribe MAP both ways. Confidences are over the proposable ids (MAP:
the whole vocabulary, [MASK] included); the prompt is not masked (as MAP's StepMerge; d2's masks it
with ``p_mask_prompt``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.contracts import TokenScores, as_model_fns, call_hidden, call_logits
from daca_jax.likelihood.base import EstimatorOptions, estimator
from daca_jax.likelihood.common import check_steps, policy_ids
from daca_jax.config.checks import _check_fields, _non_negative, _one_of, _positive
from daca_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class StepMergeConfig:
  """d2's StepMerge trajectory likelihood with MAP's position term (``rl.likelihood="stepmerge"``,
  :mod:`daca_jax.likelihood.stepmerge`).

  Attributes:
    segments: N, runs of consecutive denoising steps (MAP's gsm8k recipe: 32).
    sample: K segments scored per update (0: all N); MAP's recipe: 12.
    position: also return the unmasking-position log-probs (the objective ``map`` reads them).
    position_method: "softmax" (Plackett-Luce choice among the competitors) or "bradley_terry".
    position_scope: competitors of a token: "segment" (positions unmasked in later segments) or
      "position" (also later steps of its own segment).
    position_confidence: "max_logit" or "top_prob" (the competitors' confidence).
    position_source: "gt" (the committed token's logit / probability) or "max" (as the competitors').
    position_temperature: tau of the position scores (> 0).
    segment_convention: "d2" (segment g scores the steps ``[⌊gS/N⌋, ⌊(g+1)S/N⌋)``) or "map" (MAP's
      ``(g⌊S/N⌋, (g+1)⌊S/N⌋]``, counted from step 0, which never scores the step-0 tokens).
  """

  segments: int = 32
  sample: int = 0
  position: bool = True
  position_method: str = "softmax"
  position_scope: str = "segment"
  position_confidence: str = "max_logit"
  position_source: str = "gt"
  position_temperature: float = 1.0
  segment_convention: str = "d2"

  def validate(self, prefix: str = "likelihood.stepmerge") -> "StepMergeConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "segments")
    _non_negative(prefix, self, "sample")
    if self.sample > self.segments:
      raise ConfigError(f"{prefix}.sample", self.sample, f"0 (all) or at most {prefix}.segments={self.segments}")
    _one_of(prefix, self, "position_method", ("softmax", "bradley_terry"))
    _one_of(prefix, self, "position_scope", ("segment", "position"))
    _one_of(prefix, self, "position_confidence", ("max_logit", "top_prob"))
    _one_of(prefix, self, "position_source", ("gt", "max"))
    _one_of(prefix, self, "segment_convention", ("d2", "map"))
    if not self.position_temperature > 0:
      raise ConfigError(f"{prefix}.position_temperature", self.position_temperature, "a number > 0")
    return self

_NEG = -1e30


def segment_starts(steps: int, segments: int) -> np.ndarray:
  """int32 [N+1] first step of each segment, then S: ``⌊g S / N⌋`` (d2's ``int(index * (steps / N))``)."""
  return np.asarray([g * steps // segments for g in range(segments)] + [steps], np.int32)


def token_segments(commit_step: jax.Array, steps: int, segments: int) -> jax.Array:
  """int32 [B, L] the segment of each position's commit step (the last start at or before it)."""
  starts = jnp.asarray(segment_starts(steps, segments)[:-1])
  return jnp.sum(jnp.clip(commit_step, 0, steps - 1)[..., None] >= starts, axis=-1).astype(jnp.int32) - 1


def sample_segments(key: jax.Array, seg: jax.Array, valid: jax.Array, segments: int, sample: int) -> jax.Array:
  """int32 [B, K] distinct segments per row (K = ``sample``, or all N when 0), uniformly among those
  holding a valid token (Gumbel top-K; segments without one rank last, and their tokens are all
  invalid, so they add no target)."""
  if not sample:
    return jnp.broadcast_to(jnp.arange(segments, dtype=jnp.int32), (seg.shape[0], segments))
  has = jnp.any((seg[:, None, :] == jnp.arange(segments)[None, :, None]) & (valid[:, None, :] > 0), -1)
  score = jax.random.gumbel(key, has.shape) + jnp.where(has, 0.0, -1e9)
  return jnp.argsort(-score, axis=-1)[:, :sample].astype(jnp.int32)


def _pass_stats(logits: jax.Array, targets: jax.Array, ok: np.ndarray | None):
  """(log-prob, own logit, own prob, max logit, top prob) float32 [B, L] of ``targets`` under logits
  restricted to the ids ``ok``."""
  z = logits.astype(jnp.float32)
  if ok is not None:
    z = jnp.where(jnp.asarray(ok), z, _NEG)
  lse = jax.nn.logsumexp(z, axis=-1)
  own = jnp.take_along_axis(z, targets[..., None], axis=-1)[..., 0]
  top = jnp.max(z, axis=-1)
  return own - lse, own, jnp.exp(own - lse), top, jnp.exp(top - lse)


def completion_stats(fns: Any, params: Any, x: jax.Array, comp: jax.Array, prompt_len: int, mask_id: int):
  """:func:`_pass_stats` of the completion positions of ``x`` under the sampler's policy. With the
  model's hidden/head split the output head runs on the completion only, ``logprob_chunk`` positions
  at a time (rematerialised), so ``[B, T, V]`` logits never exist at once (LLaDA: V = 126k)."""
  if not fns.has_split:
    logits = call_logits(fns, params, x)[0][:, prompt_len:]
    return _pass_stats(logits, comp, policy_ids(fns, params, logits.shape[-1], mask_id))
  ok = policy_ids(fns, params, None, mask_id)
  hidden = call_hidden(fns, params, x)[:, prompt_len:]  # [B, L, D]
  b, length = comp.shape
  chunk = fns.logprob_chunk if 0 < fns.logprob_chunk < length else length
  pad = -length % chunk
  h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, -1, chunk, hidden.shape[-1]).swapaxes(0, 1)
  y = jnp.pad(comp, ((0, 0), (0, pad))).reshape(b, -1, chunk).swapaxes(0, 1)
  body = jax.checkpoint(lambda hy: jnp.stack(_pass_stats(fns.head(params, hy[0]), hy[1], ok)))
  out = jax.lax.map(body, (h, y))  # [n, 5, B, C]
  out = out.transpose(1, 2, 0, 3).reshape(5, b, -1)[:, :, :length]
  return tuple(out)


def position_logprobs(own_conf: jax.Array, all_conf: jax.Array, competitor: jax.Array, method: str,
                      tau: float) -> jax.Array:
  """float32 [B, L] each token's unmasking-position log-prob.

  Args:
    own_conf: float32 [B, L] c_i; all_conf: float32 [B, L] a_j; competitor: bool [B, L, L]
      (i, j): j competes with i (self excluded by the caller).
    method: "softmax" or "bradley_terry"; tau: τ > 0.
  """
  c, a = own_conf / tau, all_conf / tau
  if method == "softmax":
    others = jnp.where(competitor, a[:, None, :], _NEG)  # [B, L, L]
    return c - jnp.logaddexp(c, jax.nn.logsumexp(others, axis=-1))
  return jnp.sum(jnp.where(competitor, jax.nn.log_sigmoid(c[:, :, None] - a[:, None, :]), 0.0), axis=-1)


@estimator("stepmerge")
def stepmerge_logprobs(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array, *,
                       mask_id: int, commit_step: jax.Array | None = None,
                       completion_mask: jax.Array | None = None, stepmerge: StepMergeConfig = StepMergeConfig(),
                       trajectory_steps: int = EstimatorOptions.trajectory_steps,
                       strata_batch: int = EstimatorOptions.strata_batch) -> TokenScores:
  """StepMerge token log-probs (and MAP's position log-probs) of the sampled segments.

  Args:
    tokens: int32 [B, P+L]; key: the segment draw (shared by θ, θ_old, θ_ref).
    commit_step: int32 [B, L] from the Trajectory; completion_mask: float32 [B, L] (all valid if None).
    stepmerge: N, K and the position options (``likelihood.stepmerge``).
    trajectory_steps: S (> 0; the learner sets it); strata_batch: passes kept at once (0: all).
  Returns:
    :class:`~daca_jax.contracts.TokenScores` with S = 2 (token | position) or 1 contexts, mask 1 on
    the tokens of the sampled segments; K (or N) forward passes.
  Raises:
    ValueError: no ``commit_step``, S unset, or N > S.
  """
  steps, n = trajectory_steps, stepmerge.segments
  check_steps("stepmerge", {"commit_step": commit_step}, steps, "likelihood.stepmerge.segments", n)
  b, total = tokens.shape
  length = total - prompt_len
  valid = jnp.ones((b, length), jnp.float32) if completion_mask is None else completion_mask
  prompt, comp = tokens[:, :prompt_len], tokens[:, prompt_len:]
  if stepmerge.segment_convention == "map":
    # MAP: block n scores unmask steps (n·⌊S/N⌋, (n+1)·⌊S/N⌋] counted from 0, in the state after step n·⌊S/N⌋;
    # with every step one lower that is [start, next) in the state before start, and the step-0 tokens (and
    # those past N·⌊S/N⌋ when N does not divide S) fall in no segment.
    size = steps // n
    commit_step = commit_step - 1
    seg = jnp.where((commit_step >= 0) & (commit_step < n * size), commit_step // size, -1).astype(jnp.int32)
    starts = jnp.arange(n + 1, dtype=jnp.int32) * size
  else:
    seg = token_segments(commit_step, steps, n)
    starts = jnp.asarray(segment_starts(steps, n))
  chosen = sample_segments(key, seg, valid, n, stepmerge.sample)  # [B, K]
  fns = as_model_fns(logits_fn)
  later_step = commit_step[:, None, :] > commit_step[:, :, None]  # [B, i, j]: j committed after i
  not_self = ~jnp.eye(length, dtype=bool)[None]

  def one(g: jax.Array) -> tuple[jax.Array, jax.Array]:  # g: int32 [B], one segment per row
    x = jnp.concatenate([prompt, jnp.where(commit_step >= starts[g][:, None], mask_id, comp)], axis=1)
    logp, own_logit, own_prob, top_logit, top_prob = completion_stats(fns, params, x, comp, prompt_len, mask_id)
    here = seg == g[:, None]
    if not stepmerge.position:
      return jnp.where(here, logp, 0.0), jnp.zeros_like(logp)
    use_prob = stepmerge.position_confidence == "top_prob"
    all_conf = top_prob if use_prob else top_logit
    own_conf = all_conf if stepmerge.position_source == "max" else (own_prob if use_prob else own_logit)
    # Still masked after the segment, [B, 1, L]: the later segments (and, under MAP's count, the steps past
    # its last block, which no segment scores).
    competitor = (commit_step >= starts[g + 1][:, None])[:, None, :]
    if stepmerge.position_scope == "position":
      competitor = competitor | ((seg == g[:, None])[:, None, :] & later_step)
    pos = position_logprobs(own_conf, all_conf, competitor & not_self, stepmerge.position_method,
                            stepmerge.position_temperature)
    return jnp.where(here, logp, 0.0), jnp.where(here, pos, 0.0)

  cols = chosen.T  # [K, B]
  if strata_batch and strata_batch < cols.shape[0]:
    tok, pos = jax.lax.map(jax.checkpoint(one, prevent_cse=False), cols, batch_size=strata_batch)
  else:
    tok, pos = jax.vmap(one)(cols)  # [K, B, L] each, zero off each pass's segment
  sampled = jnp.any(seg[None] == cols[:, :, None], axis=0).astype(jnp.float32)  # [B, L]
  if not stepmerge.position:
    return TokenScores(logp=jnp.sum(tok, 0), mask=sampled)
  return TokenScores(logp=jnp.concatenate([jnp.sum(tok, 0), jnp.sum(pos, 0)], axis=1),
                     mask=jnp.concatenate([sampled, sampled], axis=1), num_states=2)
