"""Preemption: a SIGTERM becomes a checkpoint at the next step boundary and exit code 75.

Pods and clusters stop a job with SIGTERM: a TPU VM's maintenance or preemption notice, SLURM at the
time limit (with ``#SBATCH --signal=TERM@<seconds>`` ahead of it), Kubernetes when a pod is evicted. Within
:func:`watching` (``experiments/train.py`` enters it), the first SIGTERM only sets a flag; the SFT and RL
loops (:mod:`daca_jax.run.sft_loop`, :mod:`daca_jax.run.rl_loop`) call :func:`stop_requested` at every step boundary, and where it
says so they save a checkpoint of that step, wait until it is on disk and raise :class:`Preempted`, which
``experiments/train.py`` turns into one line on stderr and exit status :data:`EXIT_PREEMPTED`. Running
the same command again resumes from that checkpoint and continues the run exactly (data order and keys
are functions of (seed, step)). Further SIGTERMs, e.g. one arriving while the checkpoint is written
or during the exit itself, change nothing (the exit status stays 75: after the first one SIGTERM stays
ignored until the process ends): the save completes (orbax writes into a temporary directory renamed when complete, so
even a SIGKILL midway leaves the previous checkpoints intact).

Several processes (``jax.distributed``) stop at the same step: at each boundary every process
contributes its flag to one all-gather (``jax.experimental.multihost_utils.process_allgather``), so a
SIGTERM that reaches one host stops all of them after the same step. JAX's own preemption service
(``multihost_utils.reached_preemption_sync_point``) needs no per-step exchange, but its step counter is
also set by orbax at every checkpoint save (``CheckpointManager.save`` calls it with the checkpoint's step),
which our SFT and RL step numbers (each phase counting from 1) would contradict; the Python handler
installed here replaces its C++ SIGTERM handler, so orbax never sees a notice either.

Exit status 75 is ``EX_TEMPFAIL`` of BSD's ``sysexits.h``, "a temporary failure; the user is invited to
retry": a requeue wrapper can tell it from a failure (1, 2, 3: :mod:`daca_jax.run.cli_errors`) and
from a process killed by the signal before it could save (143 = 128 + SIGTERM), e.g. SLURM
``python experiments/train.py ...; [ $? -eq 75 ] && scontrol requeue $SLURM_JOB_ID``, or a Kubernetes Job
whose ``podFailurePolicy`` rule ``onExitCodes: {operator: In, values: [75]}`` has ``action: Ignore``.
"""
from __future__ import annotations

import contextlib
import pathlib
import signal
import threading
from typing import Iterator

import jax
import numpy as np
from jax.experimental import multihost_utils

from daca_jax import storage

# sysexits.h EX_TEMPFAIL: stopped on request with a checkpoint of the current step; rerun to resume.
EXIT_PREEMPTED = 75


class Preempted(Exception):
  """The run stopped after a SIGTERM at a step boundary, with a checkpoint of that step on disk.

  Attributes:
    phase: "SFT" or "RL"; step: the step whose checkpoint was saved; directory: the phase's checkpoints.
  """

  def __init__(self, phase: str, step: int, directory: str | pathlib.Path):
    self.phase, self.step, self.directory = phase, step, storage.as_path(directory)
    super().__init__(f"stopped by SIGTERM after {phase} step {step}; its checkpoint is in {self.directory}. "
                     f"Run the same command to resume (exit status {EXIT_PREEMPTED})")

  def __reduce__(self):  # rebuilt from its fields where it crosses a process (a grid's worker processes)
    return type(self), (self.phase, self.step, self.directory)


class GridPreempted(Preempted):
  """A grid of runs (``experiments/reproduce.py``) stopped after a SIGTERM: its running cells stopped at a
  step boundary with a checkpoint of that step, or finished, and no other cell started.

  Attributes:
    stopped: the cells that saved a checkpoint and stopped, each as "<cell> (<phase> step <step>)";
      not_started: how many other cells are still to run (not started, or lost with a worker).
  """

  def __init__(self, stopped: tuple[str, ...] | list[str], not_started: int):  # pylint: disable=super-init-not-called
    self.stopped, self.not_started = tuple(stopped), not_started
    saved = f"{', '.join(self.stopped)} saved a checkpoint of that step; " if self.stopped else ""
    Exception.__init__(self, f"stopped by SIGTERM: {saved}{not_started} other cell(s) still to run; finished cells "
                             f"are kept. Run the same command to resume (exit status {EXIT_PREEMPTED})")

  def __reduce__(self):
    return type(self), (self.stopped, self.not_started)


class _Watch:
  """The state of :func:`watching`: SIGTERMs received by this process."""

  def __init__(self) -> None:
    self.signals = 0

  def handle(self, signum: int, frame: object) -> None:
    del signum, frame
    self.signals += 1  # nothing else: the handler may run in the middle of a checkpoint write


_active: _Watch | None = None


@contextlib.contextmanager
def watching() -> Iterator[None]:
  """Within this block a SIGTERM is a request to stop at the next step boundary (module docstring).

  The previous handler is restored on exit, unless a SIGTERM arrived: then further SIGTERMs stay
  ignored for the rest of the process, so that the exit status stays 75 whatever follows. Outside the
  main thread (where Python cannot install signal
  handlers) the block watches nothing: a SIGTERM then has its usual effect.
  """
  global _active
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  watch, outer = _Watch(), _active
  previous = signal.signal(signal.SIGTERM, watch.handle)
  _active = watch
  try:
    yield
  finally:
    # Once a SIGTERM arrived the process is on its way out (the checkpoint is saved, Preempted is
    # raised): restoring the default action would let a second notice during the exit (interpreter
    # shutdown, orbax's threads joining) kill it with 143 instead of 75, and a requeue keyed on 75
    # would drop the job. SIG_IGN, unlike a Python handler, also holds through interpreter finalization.
    signal.signal(signal.SIGTERM, signal.SIG_IGN if watch.signals else previous)
    _active = outer


def signals_received() -> int:
  """SIGTERMs this process received within :func:`watching` (0 outside it)."""
  return 0 if _active is None else _active.signals


def stop_requested() -> bool:
  """Whether the run stops at this step boundary: within :func:`watching`, a SIGTERM reached this
  process or, in a multi-process run, any process. Every process must call it at every step boundary:
  there it is a collective (every process enters :func:`watching` alike, e.g. in ``train.py``)."""
  if _active is None:
    return False
  local = _active.signals > 0
  if jax.process_count() == 1:
    return local
  return bool(np.any(multihost_utils.process_allgather(np.asarray(local, np.int32))))


__all__ = ["EXIT_PREEMPTED", "GridPreempted", "Preempted", "signals_received", "stop_requested", "watching"]
