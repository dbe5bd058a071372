"""Batched evaluation: decode a task's prompts with the rollout sampler and grade the completions."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import numpy as np

from daca_jax.run.metrics import PhaseProgress, progress
from daca_jax.parallel.distributed import to_host
from daca_jax.tasks.base import Example, Task


def generate(rollout_fn: Callable[..., Any], params: Any, prompts: np.ndarray, batch_size: int,
             key: jax.Array, *, show_progress: bool = False, desc: str = "eval",
             log: Callable[[str], None] | None = None) -> np.ndarray:
  """Runs ``rollout_fn`` over ``prompts`` in fixed-size batches (the last one padded).

  Args:
    rollout_fn: ``(params, prompts[b, P], key) -> Trajectory`` (jitted; one compile for all batches).
    prompts: int32 [N, P].
    batch_size: b.
    key: PRNG key; batch i uses ``fold_in(key, i)``.
    log: if given, the first batch is announced there (it compiles the decoder) and its time
      reported before the bar starts (:class:`daca_jax.run.metrics.PhaseProgress`).
  Returns:
    int32 [N, L] completion tokens (on every process of a multi-process run).
  """
  n = prompts.shape[0]
  num_batches = -(-n // batch_size)
  padded = np.concatenate([prompts, np.repeat(prompts[-1:], num_batches * batch_size - n, 0)], 0)
  outs = []
  batches = (progress(range(num_batches), desc=desc, disable=not show_progress) if log is None else
             PhaseProgress(range(num_batches), desc=desc, log=log, disable=not show_progress,
                           first=f"decoding the first of {num_batches} batches (compiles the sampler)"))
  for i in batches:
    traj = rollout_fn(params, padded[i * batch_size:(i + 1) * batch_size], jax.random.fold_in(key, i))
    outs.append(to_host(traj.completion))
  return np.concatenate(outs, 0)[:n]


def evaluate(task: Task, rollout_fn: Callable[..., Any], params: Any, examples: Sequence[Example],
             batch_size: int, key: jax.Array, *, show_progress: bool = False,
             desc: str = "eval", multiple_of: int = 1,
             log: Callable[[str], None] | None = None) -> tuple[dict[str, float], list[str]]:
  """Decodes every example and returns ``(task.metrics(...), completions)``.

  ``multiple_of``: the decoding batch (``batch_size``, or fewer for a small set) is rounded up to a
  multiple of it (e.g. the devices a multi-process batch is split over); the padding is dropped.
  ``log``: see :func:`generate`.
  """
  prompts = task.encode_prompts(examples)
  b = min(batch_size, len(examples))
  b = -(-b // multiple_of) * multiple_of
  completion_ids = generate(rollout_fn, params, prompts, b, key, show_progress=show_progress, desc=desc,
                            log=log)
  completions = task.decode_completions(completion_ids)
  return task.metrics(completions, examples), completions
