"""Group-relative advantages (GRPO; d1 uses r − mean without the std division)."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def group_advantages(rewards: jax.Array, group_size: int, normalize_std: bool = False,
                     eps: float = 1e-4) -> jax.Array:
  """``A = r − mean_group(r)`` (optionally ``/ (std_group(r) + eps)``).

  Args:
    rewards: float32 [B] with B = num_prompts * group_size, the G completions of a prompt adjacent.
    group_size: G (static).
    normalize_std: divide by the (population) std of the group.
  Returns:
    float32 [B]; zero-mean within every group.
  Raises:
    ValueError: B is not a multiple of G.
  """
  b = rewards.shape[0]
  if b % group_size:
    raise ValueError(f"batch size {b} is not a multiple of rl.group_size={group_size}")
  r = rewards.astype(jnp.float32).reshape(b // group_size, group_size)
  adv = r - jnp.mean(r, axis=1, keepdims=True)
  if normalize_std:
    adv = adv / (jnp.std(r, axis=1, keepdims=True) + eps)
  return adv.reshape(b)


def zero_std_group_fraction(rewards: jax.Array, group_size: int) -> jax.Array:
  """Fraction of groups whose rewards are all equal (they carry no GRPO signal). float32 scalar."""
  r = rewards.reshape(-1, group_size)
  return jnp.mean((jnp.max(r, 1) - jnp.min(r, 1) <= 1e-8).astype(jnp.float32))
