"""The objectives' input contract: :class:`PolicyBatch`, and its check against the log-probs it goes with."""
from __future__ import annotations

import jax

from daca_jax.contracts.pytree import field, pytree_dataclass
from daca_jax.contracts.shapes import check_optional_shape, check_shape
from daca_jax.errors import ShapeError


@pytree_dataclass
class PolicyBatch:
  """Stop-gradient inputs of an objective.

  Attributes:
    logp_old: float32 [B, L] log-probs under θ_old (the rollout policy), same masks as ``logp``.
    logp_ref: float32 [B, L] log-probs under the frozen reference policy, same masks.
    advantages: float32 [B] sequence advantages.
    weights: float32 [B, L] credit weights (0 outside the completion mask); for the targets of an
      ELBO-type estimator, times their ELBO factors (:func:`daca_jax.contracts.objective_inputs`).
    mask: float32 [B, L] completion mask (1 up to and including the first EOS); for an estimator that
      scores S contexts (L = S·L_completion), 1 on the targets inside it.
    rewards: float32 [B] raw rewards, or None (no built-in objective reads them: the advantages,
      REINFORCE++'s included, come from :mod:`daca_jax.rl.advantages`).
    commit_now: float32 [B, L'] for estimators that score rebuilt rollout states (``rldf``): 1 where
      the target position was committed at that state; None otherwise.
    token_advantages: float32 [B, L] per-token advantages that replace ``advantages[:, None] *
      weights`` (credit built on task-defined token rewards), or None. Only the methods whose loss sums
      per-token terms accept them (``Method.token_advantages``, :mod:`daca_jax.rl.methods`).
    completion_mask: float32 [B, L_c] the rollout's completion mask over its L_c completion positions,
      or None. ``logp``'s L is S·L_c for an estimator that scores S contexts; objectives that need
      that structure (SPG's per-context mask rates and per-sequence lengths) read S and the lengths
      from it.
    num_states: S (static), the contexts the per-token fields hold, context-major (``j·L_c + i``):
      1, or the estimator's ``TokenScores.num_states`` (BGPO groups the targets of each Monte-Carlo
      sample by it).
  """

  logp_old: jax.Array
  logp_ref: jax.Array
  advantages: jax.Array
  weights: jax.Array
  mask: jax.Array
  rewards: jax.Array | None = None
  commit_now: jax.Array | None = None
  token_advantages: jax.Array | None = None
  completion_mask: jax.Array | None = None
  num_states: int = field(static=True, default=1)


def check_policy_batch(logp: jax.Array, batch: PolicyBatch, name: str = "objective",
                       group_size: int = 0) -> tuple[int, int]:
  """Checks an objective's inputs (trace time): every per-token field has ``logp``'s shape ``[B, L]``
  and the per-sequence fields are ``[B]``.

  Without it a ``[B, 1]`` advantage broadcasts against ``[B, L]`` weights to ``[B, B, L]`` and the loss
  is a silently wrong number.

  Args:
    logp: float [B, L] (L may be k·L for estimators that score rebuilt states).
    batch: the stop-gradient inputs.
    name: the objective, for the message.
    group_size: G > 0: B must be a multiple (objectives that work per group).
  Returns:
    (B, L).
  Raises:
    ShapeError: naming the field (``batch.advantages``), the shape found and the shape expected.
  """
  b, length = check_shape(f"{name}: logp", logp, ("B", "L"), "[B, L]: one log-prob per completion token")
  tok = f"[B, L] like logp {(b, length)}: one entry per scored token"
  for attr in ("logp_old", "logp_ref", "weights", "mask"):
    check_shape(f"batch.{attr}", getattr(batch, attr), (b, length), tok)
  check_shape("batch.advantages", batch.advantages, (b,), "[B]: one advantage per sequence")
  check_optional_shape("batch.rewards", batch.rewards, (b,), "[B]: one reward per sequence")
  check_optional_shape("batch.commit_now", batch.commit_now, (b, length), tok)
  check_optional_shape("batch.token_advantages", batch.token_advantages, (b, length), tok)
  if batch.completion_mask is not None:
    _, comp = check_shape("batch.completion_mask", batch.completion_mask, (b, "L_c"),
                          "[B, L_c]: the rollout's completion mask")
    if comp == 0 or length % comp:
      raise ShapeError("batch.completion_mask", batch.completion_mask.shape,
                       f"[B, L_c] with L_c dividing logp's L={length} (S contexts of L_c positions)")
  if group_size and b % group_size:
    raise ShapeError(f"{name}: logp", (b, length),
                     f"B a multiple of rl.group_size={group_size} (groups of G adjacent rows)")
  return b, length


__all__ = ["PolicyBatch", "check_policy_batch"]
