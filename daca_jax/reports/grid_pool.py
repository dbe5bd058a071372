"""Runs a grid's cells several at a time, each in a process of its own (``experiments/reproduce.py --jobs``).

Cells of one task and seed share a cached SFT warm start (:mod:`daca_jax.reports.reproduce`), which the
first of them to run trains and saves. Two cells writing that cache at once would corrupt it, so the cells
of a group start only after the group's first cell has finished; the first cells of different groups run
side by side. On one accelerator the processes share its memory: each allocates what it uses
(``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless set), not the 75% XLA takes by default.

A SIGTERM (preemption, a time limit: :mod:`daca_jax.run.preemption`) to the grid's process, to a worker or
to all of them stops the grid as it stops one run: no other cell starts, each running cell saves a
checkpoint of its step at the next step boundary (the workers run their cells within
:func:`~daca_jax.run.preemption.watching`; the grid passes its own SIGTERM on to them), and once they have
stopped the grid raises :class:`~daca_jax.run.preemption.GridPreempted` (exit status 75). Running the same
command resumes every cell from where it stopped. A grid process killed outright (SIGKILL, out of memory)
stops its workers the same way, and they exit: none is left running or holding memory.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
from concurrent.futures.process import BrokenProcessPool
import dataclasses
import multiprocessing
import os
import signal
import threading
import time
from typing import Any, Callable, Hashable, Sequence

from daca_jax.errors import WorkerDied
from daca_jax.run import preemption

# Seconds between the grid's checks for a SIGTERM while it waits on its cells.
_POLL_S = 0.5


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


class _Worker:
  """A worker process's link to its grid: the grid's stop event, the grid's process, whether a cell runs."""
  stop: Any = None
  parent: Any = None
  in_cell = False

  @classmethod
  def stopping(cls) -> bool:
    return cls.stop is not None and (cls.stop.is_set() or (cls.parent is not None and not cls.parent.is_alive()))


def _worker_init(stop: Any) -> None:
  # Runs in each worker before its first computation: backends are created lazily, after this.
  os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
  _Worker.stop, _Worker.parent = stop, multiprocessing.parent_process()
  # Between cells a SIGTERM (e.g. one sent to the whole process group) leaves the stopping to the grid,
  # which starts nothing more; a Python handler, unlike SIG_IGN, is not inherited by programs a cell runs.
  signal.signal(signal.SIGTERM, lambda signum, frame: None)
  threading.Thread(target=_follow_grid, args=(stop, _Worker.parent), daemon=True, name="grid-stop").start()


def _follow_grid(stop: Any, parent: Any) -> None:
  """Passes the grid's stop on to this worker as a SIGTERM (its running cell saves its step and stops).

  A grid process that died without a word (SIGKILL, the OOM killer) stops its workers the same way, and
  each exits once its cell has stopped: an orphaned worker would otherwise run its cell to the end and
  then wait for work forever, holding its share of the accelerator's memory.
  """
  told = False
  while True:
    orphaned = parent is not None and not parent.is_alive()
    if (orphaned or stop.is_set()) and not told:
      os.kill(os.getpid(), signal.SIGTERM)
      told = True
    if orphaned and not _Worker.in_cell:
      os._exit(0)  # pylint: disable=protected-access  (nobody to answer; the cell's checkpoint is saved)
    if told:
      time.sleep(_POLL_S)
    else:
      stop.wait(_POLL_S)


def _watched(run: Callable[..., Any], *args: Any) -> Any:
  with preemption.watching():  # a SIGTERM: the cell's loops save their step and raise Preempted
    if _Worker.stopping():  # queued before the grid stopped (or died): do not start
      raise _NotStarted()
    _Worker.in_cell = True
    try:
      return run(*args)
    finally:
      _Worker.in_cell = False


class _NotStarted(Exception):
  """A job the grid's stop reached before it started (it was already queued in the pool)."""


class _ProcessPool(cf.ProcessPoolExecutor):
  """A process pool whose workers run each job within preemption.watching(); :meth:`stop` sends them a
  SIGTERM."""

  def __init__(self, workers: int):
    ctx = multiprocessing.get_context("spawn")  # a forked JAX process can deadlock
    self._stop = ctx.Event()
    super().__init__(max_workers=workers, mp_context=ctx, initializer=_worker_init, initargs=(self._stop,))

  def submit(self, fn, /, *args, **kwargs):
    return super().submit(_watched, fn, *args, **kwargs)

  def stop(self) -> None:
    self._stop.set()


def process_pool(workers: int) -> cf.Executor:
  """``workers`` fresh Python processes (spawned), each running its jobs within
  :func:`~daca_jax.run.preemption.watching`."""
  return _ProcessPool(workers)


def run_jobs(jobs: Sequence[Job], run: Callable[..., Any], workers: int, *,
             on_done: Callable[[Job, Any], None], executor: cf.Executor | None = None) -> None:
  """Runs ``run(*job.args)`` for every job, at most ``workers`` at a time; ``on_done(job, result)`` in
  this process as each finishes (in the order they finish).

  A group's first job (in ``jobs`` order) runs alone among its group; the rest of the group start once it
  has finished. While workers are free, jobs of groups whose first job has finished go first. After a
  SIGTERM to this process (within :func:`~daca_jax.run.preemption.watching`) or a job that raised
  :class:`~daca_jax.run.preemption.Preempted`, no job starts, the running ones are told to stop (the
  default executor's workers get a SIGTERM) and are waited for.

  Args:
    jobs: the cells, in the order to start them.
    run: a module-level function (pickled by name for the worker processes).
    workers: jobs at once (>= 1).
    on_done: called for each finished job with ``run``'s return value.
    executor: where to run (default: :func:`process_pool` of ``workers`` processes, shut down at the end).

  Raises:
    ValueError: ``workers`` < 1.
    WorkerDied: a worker process died without an answer (killed, out of memory); names the jobs lost.
    GridPreempted: stopped by a SIGTERM (above) with jobs left unfinished; names those that stopped.
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
  stopped: list[str] = []  # jobs that raised Preempted
  told = False
  try:
    while True:
      stopping = bool(stopped) or preemption.signals_received() > 0
      if stopping and not told and hasattr(pool, "stop"):
        pool.stop()  # also when only a worker received the SIGTERM: the grid stops as one run
        told = True
      while not stopping and len(running) < workers and (job := next_job()) is not None:
        running[pool.submit(run, *job.args)] = job
      if not running:
        left = sum(len(q) for q in pending.values())
        if stopping and (stopped or left):
          raise preemption.GridPreempted(stopped, left)
        return
      done, _ = cf.wait(running, timeout=_POLL_S, return_when=cf.FIRST_COMPLETED)
      for future in done:
        job = running.pop(future)
        try:
          result = future.result()  # a failure: the finally below lets the running jobs finish
        except _NotStarted:
          pending.setdefault(job.group, collections.deque()).appendleft(job)
          continue
        except preemption.Preempted as e:
          stopped.append(f"{job.key} ({e.phase} step {e.step})")
          continue
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
