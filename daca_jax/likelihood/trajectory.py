"""Trajectory likelihood (TraceRL / RLDF family): score each token in the rollout state it
was actually generated from.

The rollout state before step s is rebuilt from the final tokens and the commit steps:
``x_s = [MASK] where commit_step >= s, else the final token``. Token i, committed at step c_i, is
scored as ``logp_i = log p_θ(o_i | x_{c_i})`` — the sampler's own conditional (the temperature and the
choice of which positions to commit are not part of it). One forward pass per step (S passes,
vectorised with ``jax.vmap``, or ``lax.map`` in groups of ``strata_batch``).

With ``trajectory.groups`` G_s < S the steps are split into G_s runs of consecutive steps (run g
starts at step ⌈g S / G_s⌉) and a token is scored in the state at the start of its commit step's run:
G_s passes, each token scored once, with the context the sampler had minus the tokens committed
earlier in the same run.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from daca_jax.contracts import TokenScores, token_scores
from daca_jax.likelihood.base import EstimatorOptions, estimator, split_key
from daca_jax.likelihood.common import mask_prompt, score_targets
from daca_jax.likelihood.passes import per_pass
from daca_jax.config.checks import _check_fields, _non_negative


@dataclasses.dataclass(frozen=True)
class TrajectoryConfig:
  """The sampler's own trajectory likelihood (``rl.likelihood="trajectory"``,
  :mod:`daca_jax.likelihood.trajectory`).

  Attributes:
    groups: passes: the S = ``likelihood.trajectory_steps`` steps are split into this many runs of
      consecutive steps and a token is
      scored in the state at the start of its commit step's run (0 means S: every token in its own
      commit state).
  """

  groups: int = 0

  def validate(self, prefix: str = "likelihood.trajectory") -> "TrajectoryConfig":
    _check_fields(prefix, self)
    _non_negative(prefix, self, "groups")
    return self


@estimator("trajectory")
def trajectory_logprobs(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array,
                        *, mask_id: int, commit_step: jax.Array | None = None,
                        trajectory: TrajectoryConfig = TrajectoryConfig(),
                        trajectory_steps: int = EstimatorOptions.trajectory_steps,
                        p_mask_prompt: float = EstimatorOptions.p_mask_prompt,
                        strata_batch: int = EstimatorOptions.strata_batch) -> jax.Array:
  """Per-token log-probs at the tokens' own commit states (float32 [B, L]).

  Args:
    tokens: int32 [B, P+L] rollout sequences.
    key: PRNG key (prompt masking only).
    trajectory: ``groups`` runs of consecutive steps (0: S) (``likelihood.trajectory``).
    trajectory_steps: S (static, > 0: the learner fills it from ``rollout.steps``).
    p_mask_prompt, strata_batch: as in :class:`~daca_jax.config.likelihood.LikelihoodConfig`.
    commit_step: int32 [B, L] commit step of every completion position (from the Trajectory).
  Raises:
    ValueError: no ``commit_step`` or ``trajectory_steps`` unset.
  """
  prompt, comp, starts, run = _plan(tokens, prompt_len, key, mask_id, commit_step, trajectory, trajectory_steps,
                                    p_mask_prompt)

  def at_step(s: jax.Array) -> jax.Array:
    x = jnp.concatenate([prompt, jnp.where(commit_step >= s, mask_id, comp)], axis=1)
    return score_targets(logits_fn, params, x, comp, prompt_len, mask_id)

  if strata_batch and strata_batch < starts.shape[0]:
    per_run = jax.lax.map(at_step, starts, batch_size=strata_batch)
  else:
    per_run = jax.vmap(at_step)(starts)  # [G_s, B, L]
  return jnp.take_along_axis(per_run, run[None], axis=0)[0]


def _plan(tokens: jax.Array, prompt_len: int, key: jax.Array, mask_id: int, commit_step: jax.Array | None,
          trajectory: TrajectoryConfig, steps: int, p_mask_prompt: float):
  """(masked prompt [B, P], completion [B, L], first step of each run int32 [G_s], run of each
  token int32 [B, L]), after the checks of :func:`trajectory_logprobs`."""
  if commit_step is None:
    raise ValueError("rl.likelihood='trajectory' needs the rollout's commit_step")
  if steps <= 0:
    raise ValueError("likelihood.trajectory_steps must be set to the rollout's number of steps")
  k_prompt, _ = split_key(key)
  prompt = mask_prompt(k_prompt, tokens[:, :prompt_len], p_mask_prompt, mask_id)
  groups = trajectory.groups or steps
  if not 1 <= groups <= steps:
    raise ValueError(f"likelihood.trajectory.groups={groups} must be in [1, S={steps}]")
  starts = jnp.asarray([-(-g * steps // groups) for g in range(groups)], jnp.int32)  # first step of run g
  run = jnp.clip(commit_step, 0, steps - 1) * groups // steps  # run of each token's commit step
  return prompt, tokens[:, prompt_len:], starts, run


@per_pass("trajectory", lambda cfg: cfg.trajectory.groups or cfg.trajectory_steps)
def trajectory_one_run(logits_fn: Any, params: Any, tokens: jax.Array, prompt_len: int, key: jax.Array, *,
                       mask_id: int, pass_index: jax.Array, commit_step: jax.Array | None = None,
                       trajectory: TrajectoryConfig = TrajectoryConfig(),
                       trajectory_steps: int = EstimatorOptions.trajectory_steps,
                       p_mask_prompt: float = EstimatorOptions.p_mask_prompt) -> tuple[TokenScores, jax.Array]:
  """Run ``pass_index`` alone (:mod:`daca_jax.likelihood.passes`): the log-probs of the tokens
  committed in it (0 elsewhere) and bool [B, L] those tokens; one forward pass."""
  prompt, comp, starts, run = _plan(tokens, prompt_len, key, mask_id, commit_step, trajectory, trajectory_steps,
                                    p_mask_prompt)
  x = jnp.concatenate([prompt, jnp.where(commit_step >= starts[pass_index], mask_id, comp)], axis=1)
  here = run == pass_index
  lp = score_targets(logits_fn, params, x, comp, prompt_len, mask_id)
  return token_scores(jnp.where(here, lp, 0.0)), here
