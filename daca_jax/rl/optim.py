"""Optimizers (optax): AdamW with global-norm clipping and linear warmup."""
from __future__ import annotations

import optax


def make_optimizer(learning_rate: float, warmup_steps: int, weight_decay: float, max_grad_norm: float,
                   decay_steps: int = 0, eps: float = 1e-8) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """``clip_by_global_norm -> adamw`` with a linear warmup to ``learning_rate``.

  Args:
    eps: Adam's epsilon; a larger value damps the steps of parameters whose gradients are tiny
      (sparse-reward RL batches), instead of normalising noise to full-size steps.
    decay_steps: if > 0, cosine decay to 10% of the peak over this many steps after warmup;
      otherwise the rate stays constant after warmup.
  Returns:
    (optimizer, learning-rate schedule of the update count).
  """
  if decay_steps > 0:
    schedule = optax.warmup_cosine_decay_schedule(0.0, learning_rate, max(warmup_steps, 1),
                                                  max(warmup_steps, 1) + decay_steps,
                                                  end_value=0.1 * learning_rate)
  elif warmup_steps > 0:
    schedule = optax.join_schedules(
        [optax.linear_schedule(0.0, learning_rate, warmup_steps), optax.constant_schedule(learning_rate)],
        [warmup_steps])
  else:
    schedule = optax.constant_schedule(learning_rate)
  opt = optax.chain(optax.clip_by_global_norm(max_grad_norm) if max_grad_norm > 0 else optax.identity(),
                    optax.adamw(schedule, eps=eps, weight_decay=weight_decay))
  return opt, schedule
