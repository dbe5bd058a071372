"""The limits of a sandboxed run and what it gives back (:mod:`daca_jax.tasks.sandbox.runner` runs it).

:class:`SandboxLimits` (checked on construction: a bad value is a ``ConfigError`` naming ``sandbox.<field>``),
:class:`SandboxResult` with its four statuses, and :func:`check_max_workers` of the worker pools.
"""
from __future__ import annotations

import dataclasses
import math
import os

from daca_jax.errors import ConfigError

PASSED, FAILED, TIMEOUT, ERROR = "passed", "failed", "timeout", "error"
STATUSES = (PASSED, FAILED, TIMEOUT, ERROR)


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
  """Limits of one sandboxed run.

  Attributes:
    timeout_s: wall-clock seconds before the whole process tree is killed (status ``timeout``).
    cpu_time_s: CPU seconds (``RLIMIT_CPU``, rounded up); ``None`` = ``ceil(timeout_s)``.
    memory_mb: address-space limit in MiB (``RLIMIT_AS``); allocations beyond it fail with
      ``MemoryError``. Python itself needs ~30 MiB.
    max_processes: processes+threads the program may have (``RLIMIT_NPROC``, counted inside the
      sandbox's user namespace; not applied without one, where it would count the whole user).
    max_output_bytes: bytes of stdout and of stderr read back (each).
    max_file_mb: largest file the program may write, stdout/stderr included (``RLIMIT_FSIZE``).
    disk_mb: size of the work directory's tmpfs (inside the mount namespace only).
    max_open_files: ``RLIMIT_NOFILE``.
  """

  timeout_s: float = 5.0
  cpu_time_s: float | None = None
  memory_mb: int = 1024
  max_processes: int = 32
  max_output_bytes: int = 65536
  max_file_mb: int = 16
  disk_mb: int = 64
  max_open_files: int = 256

  def __post_init__(self):
    def check(field: str, value: object, low: float, integer: bool) -> None:
      kind = int if integer else (int, float)
      if (isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value)
          or value < low):
        raise ConfigError(f"sandbox.{field}", value,
                          f"{'an int' if integer else 'a finite number'} >= {low}")

    check("timeout_s", self.timeout_s, 0.01, False)
    if self.cpu_time_s is not None:
      check("cpu_time_s", self.cpu_time_s, 0.01, False)
    check("memory_mb", self.memory_mb, 64, True)
    check("max_processes", self.max_processes, 1, True)
    check("max_output_bytes", self.max_output_bytes, 0, True)
    check("max_file_mb", self.max_file_mb, 1, True)
    check("disk_mb", self.disk_mb, 1, True)
    check("max_open_files", self.max_open_files, 16, True)


@dataclasses.dataclass(frozen=True)
class SandboxResult:
  """Outcome of one sandboxed run.

  Attributes:
    status: ``passed`` (exit code 0), ``failed`` (non-zero exit or killed by a signal),
      ``timeout`` (wall-clock or CPU-time limit), ``error`` (the sandbox itself could not run the
      program). For a judged run (:mod:`daca_jax.tasks.sandbox.judge`) ``passed`` is the judge's
      verdict instead.
    message: a short human-readable reason (e.g. the program's last stderr line).
    duration_s: wall-clock seconds of the run, setup and cleanup included.
    exit_code: the program's exit code; ``None`` when killed by a signal or never run.
    stdout, stderr: the first ``max_output_bytes`` of each, decoded as UTF-8 (``replace``).
    network_isolated: the program ran in a fresh network (and user, PID, IPC, mount) namespace.
    filesystem_isolated: Landlock confined the program's writes to its work directory.
    read_isolated: Landlock confined the program's reads to the read view
      (:mod:`daca_jax.tasks.sandbox.readview`) and its work directory.
    proc_isolated: the program had its own ``/proc`` (only the sandbox's processes).
    process_limited: ``max_processes`` was enforced (see :func:`process_limit_mode`).
  """

  status: str
  message: str
  duration_s: float
  exit_code: int | None = None
  stdout: str = ""
  stderr: str = ""
  network_isolated: bool = False
  filesystem_isolated: bool = False
  read_isolated: bool = False
  proc_isolated: bool = False
  process_limited: bool = False


def check_max_workers(max_workers: int | None) -> int:
  """``max_workers`` checked (``None`` = the number of CPUs, at least 2).

  Raises:
    ConfigError: not a positive int.
  """
  if max_workers is None:
    return max(2, os.cpu_count() or 1)
  if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
    raise ConfigError("sandbox.max_workers", max_workers, "a positive int")
  return max_workers
