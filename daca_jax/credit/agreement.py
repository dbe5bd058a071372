"""Group-agreement masking (``credit.drop_agreed``): no policy-gradient signal on tokens that every
rollout of a group committed identically at the same position.

Within a group the sequence advantages sum to zero (``A_b = r_b − mean_group r``). A token that all G
rollouts put at the same position — a copied Sudoku given, the shared EOS padding, a step every rollout
got right — therefore receives advantages that cancel in expectation: its contribution
``Σ_b A_b ∇ log p_θ(y_i | x_b)`` is zero when the rollouts' contexts agree and noise when they do not.
Dropping it keeps the tokens where the group actually differs, which is where the reward difference
comes from. On an autoregressive model with identical prefixes the cancellation is exact (the
contributions are literally equal); on a masked diffusion model the other positions differ between
rollouts, so the dropped term has mean ≈ 0 but not exactly 0: this is a variance-for-bias trade, made
explicit by the flag and measured in the project's gradient study rather than assumed.

It multiplies the weights of whichever assigner ``rl.credit`` names (uniform, DPS, DTCA, DelTA, …), so
it composes with every credit method and every objective that reads ``PolicyBatch.weights``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def group_agreement_mask(completion: jax.Array, completion_mask: jax.Array, group_size: int) -> jax.Array:
  """1 where a token differs from at least one other rollout of its group at that position.

  Args:
    completion: int32 [B, L] committed completion tokens; the G rollouts of a prompt are G adjacent rows.
    completion_mask: [B, L] (any dtype), 1 on completion tokens the loss sees.
    group_size: G (static).
  Returns:
    float32 [B, L]: 0 where all G rollouts of the row's group hold the same token at that position (or
    where ``completion_mask`` is 0), 1 elsewhere. With G = 1 every token is kept.
  Raises:
    ValueError: B is not a multiple of G, or G < 1.
  """
  b, length = completion.shape
  if group_size < 1 or b % group_size:
    raise ValueError(f"batch size {b} is not a multiple of rl.group_size={group_size} (>= 1)")
  if group_size == 1:
    return completion_mask.astype(jnp.float32)
  c = completion.reshape(b // group_size, group_size, length)
  agreed = jnp.all(c == c[:, :1], axis=1, keepdims=True)  # [B/G, 1, L]
  keep = jnp.broadcast_to(~agreed, c.shape).reshape(b, length)
  return keep.astype(jnp.float32) * completion_mask.astype(jnp.float32)
