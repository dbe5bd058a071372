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
command resumes every cell from where it stopped. A grid process killed outright (SIGKILL, out of memory),
or a pool broken by a worker's death, stops the other workers the same way, and they exit once their
cell has saved its step: none is left running or holding memory.

The grid talks to its workers through one shared byte without a lock (:data:`_RUN`, :data:`_STOP`,
:data:`_QUIT`), polled by a thread in each worker: a lock shared with a process that can be killed in the
middle of using it (the OOM killer) could block the others for good.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
from concurrent.futures.process import BrokenProcessPool
import ctypes
import dataclasses
import multiprocessing
import os
import signal
import threading
import time
from typing import Any, Callable, Hashable, Sequence

from daca_jax.errors import WorkerDied
from daca_jax.run import preemption

# Seconds between the grid's checks for a SIGTERM while it waits on its cells (and the workers' checks of
# the grid's state).
_POLL_S = 0.5
# The grid's state, as its workers read it: run; stop (running cells save their step, none starts); quit
# (stop, and exit once no cell runs: a broken pool, whose workers Python 3.12 joins without a word).
_RUN, _STOP, _QUIT = 0, 1, 2


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
  """A worker process's link to its grid (set by :func:`_worker_init`)."""
  state: Any = None  # the grid's shared state byte
  parent: Any = None  # the grid's process
  in_cell = False  # a cell is running in this process
  sigterm_between_cells = False  # a SIGTERM reached this process while no cell ran

  @classmethod
  def orphaned(cls) -> bool:
    return cls.parent is not None and not cls.parent.is_alive()


def _on_sigterm_between_cells(signum: int, frame: Any) -> None:
  del signum, frame
  _Worker.sigterm_between_cells = True  # the next cell does not start; the grid stops


def _worker_init(state: Any) -> None:
  # Runs in each worker before its first computation: backends are created lazily, after this.
  os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
  _Worker.state, _Worker.parent = state, multiprocessing.parent_process()
  # A Python handler, unlike SIG_IGN, is not inherited by the programs a cell runs.
  signal.signal(signal.SIGTERM, _on_sigterm_between_cells)
  threading.Thread(target=_follow_grid, daemon=True, name="grid-state").start()


def _follow_grid() -> None:
  """Passes the grid's stop on to this worker as a SIGTERM (a running cell saves its step and stops), and
  exits the worker once no cell runs when the grid quits or is gone: an orphaned worker would otherwise run
  its cell to the end and then wait for work forever, holding its share of the accelerator's memory."""
  told = False
  while True:
    orphaned, state = _Worker.orphaned(), _Worker.state.value
    if (orphaned or state != _RUN) and not told:
      os.kill(os.getpid(), signal.SIGTERM)
      told = True
    if (orphaned or state == _QUIT) and not _Worker.in_cell:
      os._exit(0)  # pylint: disable=protected-access  (nobody to answer; the cell's checkpoint is saved)
    time.sleep(_POLL_S)


@dataclasses.dataclass(frozen=True)
class _Finished:
  """A job's result, and whether a SIGTERM reached its worker after the cell's last step boundary."""
  value: Any
  stop: bool


class _NotStarted(Exception):
  """A job that did not start: the grid was stopping when the worker took it."""


def _watched(run: Callable[..., Any], *args: Any) -> _Finished:
  with preemption.watching():  # a SIGTERM: the cell's loops save their step and raise Preempted
    if _Worker.sigterm_between_cells or _Worker.state.value != _RUN or _Worker.orphaned():
      raise _NotStarted()
    _Worker.in_cell = True
    try:
      value = run(*args)
    finally:
      _Worker.in_cell = False
    return _Finished(value, preemption.signals_received() > 0)


class _ProcessPool(cf.ProcessPoolExecutor):
  """A process pool whose workers run each job within preemption.watching(); :meth:`tell` sets the
  grid's state they follow."""

  def __init__(self, workers: int):
    ctx = multiprocessing.get_context("spawn")  # a forked JAX process can deadlock
    self._state = ctx.RawValue(ctypes.c_int8, _RUN)  # no lock: see the module docstring
    super().__init__(max_workers=workers, mp_context=ctx, initializer=_worker_init, initargs=(self._state,))
    # Start every worker with the pool's manager thread. Spawned one per submit (CPython's default outside
    # fork), a worker can start after that thread has taken its list of worker sentinels; its death then
    # goes unnoticed until another job finishes (its cell, up to an hour), and so does the broken pool.
    self._safe_to_dynamically_spawn_children = False

  def submit(self, fn, /, *args, **kwargs):
    return super().submit(_watched, fn, *args, **kwargs)

  def tell(self, state: int) -> None:
    self._state.value = max(self._state.value, state)


def process_pool(workers: int) -> cf.Executor:
  """``workers`` fresh Python processes (spawned), each running its jobs within
  :func:`~daca_jax.run.preemption.watching`."""
  return _ProcessPool(workers)


def run_jobs(jobs: Sequence[Job], run: Callable[..., Any], workers: int, *,
             on_done: Callable[[Job, Any], None], executor: cf.Executor | None = None) -> None:
  """Runs ``run(*job.args)`` for every job, at most ``workers`` at a time; ``on_done(job, result)`` in
  this process as each finishes (in the order they finish).

  A group's first job (in ``jobs`` order) runs alone among its group; the rest of the group start once it
  has finished. While workers are free, jobs of groups whose first job has finished go first.

  A SIGTERM to this process (within :func:`~daca_jax.run.preemption.watching`, also while running jobs
  finish after a failure) or to a worker of the default executor stops the grid: no job starts, the
  running ones are told to save their step and stop, and are waited for.

  Args:
    jobs: the cells, in the order to start them.
    run: a module-level function (pickled by name for the worker processes).
    workers: jobs at once (>= 1).
    on_done: called for each finished job with ``run``'s return value.
    executor: where to run (default: :func:`process_pool` of ``workers`` processes, shut down at the end).

  Raises:
    ValueError: ``workers`` < 1.
    WorkerDied: a worker process died without an answer (killed, out of memory); names the jobs lost. The
      other workers save their step and exit.
    GridPreempted: stopped by a SIGTERM (above) with jobs left unfinished; names those that stopped.
    Exception: the first exception a job raised, after the jobs already running have finished (their
      cells are kept) and without starting any other.
  """
  if workers < 1:
    raise ValueError(f"workers={workers}: expected an integer >= 1")
  workers = min(workers, len(jobs))  # no more processes than jobs (--jobs=10**11 is a valid request)
  if not jobs:
    return
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
  tell = getattr(pool, "tell", lambda state: None)
  running: dict[cf.Future, Job] = {}
  stopped: list[str] = []  # jobs that saved their step and stopped
  stopping = False
  try:
    while True:
      stopping = stopping or preemption.signals_received() > 0
      if stopping:
        tell(_STOP)
      while not stopping and len(running) < workers and (job := next_job()) is not None:
        running[pool.submit(run, *job.args)] = job
      if not running:
        left = sum(len(q) for q in pending.values())
        if stopping and (stopped or left):
          raise preemption.GridPreempted(stopped, left)
        return
      done, _ = cf.wait(running, timeout=_POLL_S, return_when=cf.FIRST_COMPLETED)
      failure, broken = None, []
      for future in done:  # every finished job is recorded before any failure is raised
        job = running.pop(future)
        try:
          result = future.result()
        except _NotStarted:
          pending.setdefault(job.group, collections.deque()).appendleft(job)
          stopping = True
          continue
        except preemption.Preempted as e:
          stopped.append(f"{job.key} ({e.phase} step {e.step})")
          stopping = True
          continue
        except BrokenProcessPool:
          broken.append(job.key)
          continue
        except Exception as e:  # pylint: disable=broad-except  (raised below, after the others are recorded)
          failure = failure or e
          continue
        if isinstance(result, _Finished):
          stopping, result = stopping or result.stop, result.value
        ready.add(job.group)
        on_done(job, result)
      if broken:
        lost = broken + [j.key for j in running.values()]
        running.clear()  # their futures fail with the pool; the workers save their step and exit
        tell(_QUIT)
        if preemption.signals_received():  # e.g. a SIGTERM to the process group killed a starting worker
          raise preemption.GridPreempted(stopped, sum(len(q) for q in pending.values()) + len(lost))
        raise WorkerDied(f"a worker process died (killed by the system, e.g. out of memory, or crashed) "
                         f"while running {', '.join(lost)}; finished cells are kept: rerun the same command "
                         f"to resume them, with fewer --jobs if memory ran out")
      if failure is not None:
        raise failure
  finally:
    while running:  # after a failure: the running jobs finish; a SIGTERM meanwhile still stops them
      if preemption.signals_received():
        tell(_STOP)
      done, _ = cf.wait(running, timeout=_POLL_S, return_when=cf.FIRST_COMPLETED)
      for future in done:
        running.pop(future)
    if own:
      pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["Job", "process_pool", "run_jobs"]
