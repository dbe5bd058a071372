"""The evaluation decode loop, shared by the main job and the evaluation harness: a task's prompts
decoded with the rollout sampler in fixed-size batches, then graded."""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Iterable, Iterator, Sequence

import jax
import numpy as np

from daca_jax.progress import PhaseProgress, progress
from daca_jax.parallel.distributed import to_host
from daca_jax.tasks.base import Example, Task


@dataclasses.dataclass(frozen=True)
class DecodedBatch:
  """One decoded batch of :func:`decode_batches`.

  Attributes:
    index: k, the batch number (rows ``k·b … k·b + b − 1`` of the prompts).
    rows: int64 [n_k] the prompt rows it holds (fewer than b in the last batch).
    ids: int32 [n_k, L] their completion tokens (the padding rows dropped).
    seconds: wall time of the decode, device to host included.
  """

  index: int
  rows: np.ndarray
  ids: np.ndarray
  seconds: float


def num_batches(num_prompts: int, batch_size: int) -> int:
  """⌈N / b⌉: the batches :func:`decode_batches` splits N prompts into."""
  return -(-num_prompts // batch_size)


def decode_batches(rollout_fn: Callable[..., Any], params: Any, prompts: np.ndarray, batch_size: int,
                   key: jax.Array, batches: Iterable[int] | None = None) -> Iterator[DecodedBatch]:
  """Decodes ``prompts`` in batches of ``batch_size``, one batch per ``next()`` (the arguments are
  checked at the call).

  Batch k always holds the same rows and uses the key ``fold_in(key, k)``, and the last batch is
  padded to the full size with copies of the last prompt (one compiled shape), so a batch decodes
  the same whether it is decoded alone, in another order, or after a restart: the harness resumes
  from the batches it has written; the main job decodes them all.

  Args:
    rollout_fn: ``(params, prompts[b, P], key) -> Trajectory`` (jitted; one compile for all batches).
    prompts: int32 [N, P].
    batch_size: b.
    key: PRNG key.
    batches: the batch numbers to decode, in this order (default: all, ``0 … ⌈N/b⌉ − 1``).
  Yields:
    :class:`DecodedBatch` per batch (completions on every process of a multi-process run).
  Raises:
    ValueError: ``batch_size`` < 1, no prompts, or a batch number outside ``[0, ⌈N/b⌉)``.
  """
  n = prompts.shape[0]
  if batch_size < 1 or n < 1:
    raise ValueError(f"decode_batches needs prompts and a batch size >= 1 (got N={n}, batch_size={batch_size})")
  total = num_batches(n, batch_size)
  batches = list(range(total) if batches is None else batches)
  outside = [k for k in batches if not 0 <= k < total]
  if outside:
    raise ValueError(f"batch {outside[0]} is outside [0, {total}) for {n} prompts in batches of {batch_size}")
  return _decode(rollout_fn, params, prompts, batch_size, key, batches)  # checked now, decoded lazily


def _decode(rollout_fn: Callable[..., Any], params: Any, prompts: np.ndarray, batch_size: int,
            key: jax.Array, batches: list[int]) -> Iterator[DecodedBatch]:
  n = prompts.shape[0]
  for k in batches:
    rows = np.arange(k * batch_size, min((k + 1) * batch_size, n))
    padded = prompts[np.minimum(np.arange(k * batch_size, (k + 1) * batch_size), n - 1)]  # [b, P]
    t0 = time.perf_counter()
    ids = np.asarray(to_host(rollout_fn(params, padded, jax.random.fold_in(key, k)).completion))
    yield DecodedBatch(k, rows, ids[:len(rows)], time.perf_counter() - t0)


def generate(rollout_fn: Callable[..., Any], params: Any, prompts: np.ndarray, batch_size: int,
             key: jax.Array, *, show_progress: bool = False, desc: str = "eval",
             log: Callable[[str], None] | None = None) -> np.ndarray:
  """Every completion of :func:`decode_batches`, in prompt order.

  Args:
    rollout_fn, prompts, batch_size, key: as :func:`decode_batches`.
    log: if given, the first batch is announced there (it compiles the decoder) and its time
      reported before the bar starts (:class:`daca_jax.progress.PhaseProgress`).
  Returns:
    int32 [N, L] completion tokens (on every process of a multi-process run).
  """
  batches = decode_batches(rollout_fn, params, prompts, batch_size, key)
  total = num_batches(prompts.shape[0], batch_size)
  batches = (progress(batches, total=total, desc=desc, disable=not show_progress) if log is None else
             PhaseProgress(batches, total=total, desc=desc, log=log, disable=not show_progress,
                           first=f"decoding the first of {total} batches (compiles the sampler)"))
  return np.concatenate([b.ids for b in batches], 0)


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
