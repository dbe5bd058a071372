"""Timing helpers for ``experiments/benchmark.py``: compile once, then best-of-N wall time."""
from __future__ import annotations

import time
from typing import Any, Callable

import jax


def time_fn(fn: Callable[..., Any], *args: Any, repeats: int = 5, warmup: int = 1) -> dict[str, float]:
  """Compile time and best/median run time (seconds) of ``fn(*args)``, blocking on the result.

  Returns:
    {"compile_s": first call, "best_s": fastest of ``repeats``, "median_s": median of ``repeats``}.
  """
  t0 = time.perf_counter()
  jax.block_until_ready(fn(*args))
  compile_s = time.perf_counter() - t0
  for _ in range(max(warmup - 1, 0)):
    jax.block_until_ready(fn(*args))
  runs = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    runs.append(time.perf_counter() - t0)
  runs.sort()
  return {"compile_s": compile_s, "best_s": runs[0], "median_s": runs[len(runs) // 2]}


def compiled_temp_bytes(fn: Callable[..., Any], *args: Any) -> int:
  """XLA's compiled temporary-buffer size (bytes) of ``jax.jit(fn)(*args)``: the peak scratch memory."""
  stats = jax.jit(fn).lower(*args).compile().memory_analysis()
  return int(stats.temp_size_in_bytes)
