"""The rollout's output contract: :class:`Trajectory`, and the check of a trajectory against the
rollout config that is said to have produced it."""
from __future__ import annotations

from typing import Any

import jax

from daca_jax.contracts.pytree import field, pytree_dataclass
from daca_jax.contracts.shapes import check_optional_shape, check_shape, shape_of
from daca_jax.errors import ShapeError


@pytree_dataclass
class Trajectory:
  """What a rollout returns.

  Attributes:
    tokens: int32 [B, P+L] final sequences (prompt then completion).
    completion_mask: float32 [B, L]: 1 up to and including the first EOS, 0 after (all 1 if no EOS).
    commit_step: int32 [B, L] global step (0..S-1) at which each completion position was unmasked.
    commit_conf: float32 [B, L] model probability of the committed token at its commit step.
    step_conf: float32 [S, B, L] top-1 probability of every still-masked completion position when the
      model saw x_s (0 where already committed), or None when not recorded.
    step_entropy: float32 [S, B, L] predictive entropy (nats) in the same layout, or None.
    commit_hidden: [B, L, D] final hidden state of each completion position at its commit step (the
      features DelTA reads), or None when not recorded.
    prompt_len: P (static).
    num_model_calls: forward passes of the static schedule (static; = S, the upper bound).
    model_calls: int32 [] forward passes actually run: S for plain decoding, fewer when threshold
      decoding finished blocks early (with ``kv_cache`` each block's first call is a full pass, the
      others run only the cached query window); None for trajectories not made by :func:`rollout`.
    finished: bool []: no ``[MASK]`` left in the completion and every ``commit_step`` >= 0 (always
      True by construction; :func:`daca_jax.diffusion.proposals.assert_finished` checks it on the
      host where the caller reads the rollout anyway); None for trajectories not made by
      :func:`rollout`.
    mask_id: the ``[MASK]`` id the rollout used (static; -1 when unknown).
  """

  tokens: jax.Array
  completion_mask: jax.Array
  commit_step: jax.Array
  commit_conf: jax.Array
  step_conf: jax.Array | None = None
  step_entropy: jax.Array | None = None
  commit_hidden: jax.Array | None = None
  prompt_len: int = field(static=True, default=0)
  num_model_calls: int = field(static=True, default=0)
  model_calls: jax.Array | None = None
  finished: jax.Array | None = None
  mask_id: int = field(static=True, default=-1)

  @property
  def completion(self) -> jax.Array:
    """int32 [B, L] completion tokens."""
    return self.tokens[:, self.prompt_len:]


def check_trajectory(traj: Trajectory, rollout_cfg: Any, name: str = "trajectory",
                     cfg_name: str = "rollout_cfg") -> tuple[int, int]:
  """Checks a trajectory against the rollout geometry it is used with (trace time).

  Credit assigners read the step records with the config's block and step layout, so a config whose
  ``steps`` or ``gen_length`` differ from the rollout's would attribute progress to the wrong steps
  or blocks without an error.

  Args:
    traj: the rollout.
    rollout_cfg: a :class:`daca_jax.config.rollout.RolloutConfig` (``gen_length``, ``steps``).
  Returns:
    (B, L).
  Raises:
    ShapeError: ``tokens`` not ``[B, P+L]`` with ``L = gen_length``; ``completion_mask``,
      ``commit_step``, ``commit_conf`` not ``[B, L]``; ``step_conf`` / ``step_entropy`` not
      ``[steps, B, L]``; ``commit_hidden`` not ``[B, L, D]``; or ``num_model_calls`` (set by the
      rollout) other than ``steps``.
  """
  b, total = check_shape(f"{name}.tokens", traj.tokens, ("B", "P+L"), "[B, P+L]: prompt then completion")
  length = total - traj.prompt_len
  if length != rollout_cfg.gen_length:
    raise ShapeError(f"{name}.tokens", (b, total),
                     f"(B, prompt_len + {cfg_name}.gen_length) = (B, {traj.prompt_len} + "
                     f"{rollout_cfg.gen_length}) (the trajectory has L = {length} completion positions)")
  rows = f"[B, L]: one entry per completion position, L = {cfg_name}.gen_length"
  for attr in ("completion_mask", "commit_step", "commit_conf"):
    check_shape(f"{name}.{attr}", getattr(traj, attr), (b, length), rows)
  steps = rollout_cfg.steps
  if traj.num_model_calls and traj.num_model_calls != steps:
    raise ShapeError(f"{name}.num_model_calls", traj.num_model_calls,
                     f"{cfg_name}.steps = {steps} (the rollout ran a different schedule)", what="value")
  for attr in ("step_conf", "step_entropy"):
    check_optional_shape(f"{name}.{attr}", getattr(traj, attr), (steps, b, length),
                         f"[S, B, L] with S = {cfg_name}.steps = {steps}: one record per denoising step")
  check_optional_shape(f"{name}.commit_hidden", traj.commit_hidden, (b, length, "D"), "[B, L, D]")
  return b, length


__all__ = ["Trajectory", "check_trajectory"]
