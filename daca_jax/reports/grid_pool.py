"""Runs a grid's cells several at a time, each in a process of its own (``experiments/reproduce.py --jobs``).

Cells of one task and seed share a cached SFT warm start (:mod:`daca_jax.reports.reproduce`), which the
first of them to run trains and saves. Two cells writing that cache at once would corrupt it, so the cells
of a group start only after the group's first cell has finished; the first cells of different groups run
side by side. On one accelerator the processes share its memory: each allocates what it uses
(``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless set), not the 75% XLA takes by default.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
from concurrent.futures.process import BrokenProcessPool
import dataclasses
import multiprocessing
import os
from typing import Any, Callable, Hashable, Sequence

from daca_jax.errors import WorkerDied


@dataclasses.dataclass(frozen=True)
class Job:
  """One cell to run.

  Attributes:
    key: the cell's name (its folder under ``cells/``).
    group: cells of one group share state the first of them writes (the SFT warm start of a task and seed).
    args: the arguments of the run function, picklable.
  """
  key: str
  group: Hashable
  args: tuple[Any, ...]


def _worker_init() -> None:
  # Runs in each worker before its first computation: backends are created lazily, after this.
  os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def process_pool(workers: int) -> cf.Executor:
  """``workers`` fresh Python processes (spawned: a forked JAX process can deadlock)."""
  return cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                initializer=_worker_init)


def run_jobs(jobs: Sequence[Job], run: Callable[..., Any], workers: int, *,
             on_done: Callable[[Job, Any], None], executor: cf.Executor | None = None) -> None:
  """Runs ``run(*job.args)`` for every job, at most ``workers`` at a time; ``on_done(job, result)`` in
  this process as each finishes (in the order they finish).

  A group's first job (in ``jobs`` order) runs alone among its group; the rest of the group start once it
  has finished. While workers are free, jobs of groups whose first job has finished go first.

  Args:
    jobs: the cells, in the order to start them.
    run: a module-level function (pickled by name for the worker processes).
    workers: jobs at once (>= 1).
    on_done: called for each finished job with ``run``'s return value.
    executor: where to run (default: :func:`process_pool` of ``workers`` processes, shut down at the end).

  Raises:
    ValueError: ``workers`` < 1.
    WorkerDied: a worker process died without an answer (killed, out of memory); names the jobs lost.
    Exception: the first exception a job raised, after the jobs already running have finished (their
      cells are kept) and without starting any other.
  """
  if workers < 1:
    raise ValueError(f"workers={workers}: expected an integer >= 1")
  pending: dict[Hashable, collections.deque[Job]] = {}
  for job in jobs:
    pending.setdefault(job.group, collections.deque()).append(job)
  started, ready = set(), set()

  def next_job() -> Job | None:
    for group, queue in pending.items():  # a group whose shared state exists: no waiting on it
      if queue and group in ready:
        return queue.popleft()
    for group, queue in pending.items():
      if queue and group not in started:
        started.add(group)
        return queue.popleft()
    return None

  own = executor is None
  pool = process_pool(workers) if own else executor
  running: dict[cf.Future, Job] = {}
  try:
    while True:
      while len(running) < workers and (job := next_job()) is not None:
        running[pool.submit(run, *job.args)] = job
      if not running:
        return
      done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
      for future in done:
        job = running.pop(future)
        try:
          result = future.result()  # a failure: the finally below lets the running jobs finish
        except BrokenProcessPool:
          lost = [job.key] + [j.key for j in running.values()]
          running.clear()  # they died with the pool
          raise WorkerDied(f"a worker process died (killed by the system, e.g. out of memory, or crashed) "
                           f"while running {', '.join(lost)}; finished cells are kept: rerun the same command "
                           f"to resume them, with fewer --jobs if memory ran out") from None
        ready.add(job.group)
        on_done(job, result)
  finally:
    if running:
      cf.wait(running)
    if own:
      pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["Job", "process_pool", "run_jobs"]
