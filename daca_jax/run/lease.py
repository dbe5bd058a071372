"""One run per workdir at a time: the lease a run holds on its workdir while it trains.

Two ``train.py`` commands on one workdir (a preempted job relaunched while its old VM still runs, a
command pasted twice) would each train, overwrite each other's checkpoints and metrics, and read each
other's cached evaluations as their own. So the first thing a run does in its workdir is take
``<workdir>/lease.json``, created only if absent (written aside and hard-linked to its name), naming the holder: host, pid
(with the process's start time, so a reused pid is not taken for the holder), a run id, the start time,
and the last renewal, which a background thread refreshes every :data:`RENEW_S` seconds. A second run
finds the file and is refused with one line naming the holder, before any work.

A lease is taken over, and the run says so, when its holder is dead (same host, and that pid is gone or
is another process now) or its renewal has lapsed (:data:`LAPSE_S`: a holder on another host that
stopped, a killed VM). A run releases its lease when it ends, however it ends short of ``kill -9``
(finished, an error, SIGTERM's checkpoint-and-exit). In a multi-process run process 0 holds the lease
for the whole run and tells the other processes whether they may go on.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import socket
import threading
import time
import uuid
from typing import Any, Callable, Iterator

from daca_jax.errors import ConfigError
from daca_jax.io_utils import atomic_write_json

LEASE_FILE = "lease.json"
RENEW_S = 30.0  # how often the holder refreshes "renewed"
LAPSE_S = 600.0  # a lease not renewed for this long is stale (its holder stopped without releasing it)


def _process_start(pid: int) -> str | None:
  """The start time of process ``pid`` (clock ticks since boot, ``/proc/<pid>/stat`` field 22), None where
  unreadable (no such process, not Linux)."""
  try:
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
  except OSError:
    return None
  return stat.rsplit(")", 1)[1].split()[19]  # fields after the command name; field 22 overall


def _alive(holder: dict[str, Any]) -> bool | None:
  """Whether the holder process runs (True / False), None when it cannot be told from this host."""
  if holder.get("host") != socket.gethostname():
    return None
  pid = holder.get("pid")
  if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
    return False
  if pathlib.Path("/proc/self/stat").exists():  # Linux: the pid's entry and its start time
    started = _process_start(pid)
    return started is not None and started == holder.get("pid_start")  # a reused pid is another process
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def _describe(holder: dict[str, Any], now: float) -> str:
  renewed = holder.get("renewed")
  ago = f", renewed {now - renewed:.0f} s ago" if isinstance(renewed, (int, float)) else ""
  return (f"run {holder.get('run_id', '?')} (host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, "
          f"started {holder.get('started_at', '?')}{ago})")


class WorkdirLease:
  """The lease of one run on ``workdir`` (module docstring). Use as a context manager.

  Args:
    workdir: the run's folder (it exists).
    log: where a take-over is announced.
    lapse_s: seconds without renewal after which another run may take the lease over.
    renew_s: seconds between renewals.
  """

  def __init__(self, workdir: str | os.PathLike, log: Callable[[str], None] = print, *,
               lapse_s: float = LAPSE_S, renew_s: float = RENEW_S):
    self.path = pathlib.Path(workdir) / LEASE_FILE
    self.log, self.lapse_s, self.renew_s = log, lapse_s, renew_s
    self.run_id = uuid.uuid4().hex[:12]
    self._stop = threading.Event()
    self._thread: threading.Thread | None = None

  def _record(self) -> dict[str, Any]:
    now = time.time()
    return {"run_id": self.run_id, "host": socket.gethostname(), "pid": os.getpid(),
            "pid_start": _process_start(os.getpid()),
            "started_at": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)), "renewed": now}

  def _read(self) -> dict[str, Any] | None:
    """The lease on disk; None when there is none; ``{}`` when it is unreadable (a write cut short)."""
    try:
      holder = json.loads(self.path.read_text(encoding="utf-8"))
    except FileNotFoundError:
      return None
    except (OSError, ValueError):
      return {}
    return holder if isinstance(holder, dict) else {}

  def acquire(self) -> None:
    """Takes the lease, or takes over a stale one (said in one line).

    Raises:
      ConfigError: ``--workdir`` is held by a live run (the message names it).
    """
    if not self._create():
      self._take_over()
    self._thread = threading.Thread(target=self._renew, name="workdir-lease", daemon=True)
    self._thread.start()

  def _take_over(self) -> None:
    holder = self._read()
    now = time.time()
    if holder is None:  # released between our create and our read: once more
      if self._create():
        return
      raise ConfigError("--workdir", str(self.path.parent), "a workdir no other run is using: another run "
                        f"is taking it ({self.path})")
    alive = _alive(holder)
    renewed = holder.get("renewed")
    if not isinstance(renewed, (int, float)):  # unreadable: as old as the file
      try:
        renewed = self.path.stat().st_mtime
      except FileNotFoundError:
        renewed = 0.0
    lapsed = now - renewed > self.lapse_s
    if alive is True or (alive is None and not lapsed):
      raise ConfigError("--workdir", str(self.path.parent),
                        f"a workdir no other run is using: {_describe(holder, now)} holds it ({self.path}); "
                        "wait for that run, stop it, or use another --workdir")
    why = "its process is gone" if alive is False else f"not renewed for {self.lapse_s:.0f} s"
    atomic_write_json(self.path, self._record())
    time.sleep(0.2)  # two runs taking over at once: the last write wins, the other sees it and stops
    if (self._read() or {}).get("run_id") != self.run_id:
      raise ConfigError("--workdir", str(self.path.parent), "a workdir no other run is using: another run took "
                        f"over its stale lease at the same time ({self.path})")
    self.log(f"Workdir lease: taking over {self.path} from {_describe(holder, now)}: {why}.")

  def _create(self) -> bool:
    """Creates the lease file, whole, if absent: written beside it and hard-linked to its name (which fails
    if the name exists), so no reader ever sees it half-written; whether it did."""
    tmp = self.path.with_name(f".{LEASE_FILE}.{self.run_id}")
    tmp.write_text(json.dumps(self._record()), encoding="utf-8")
    try:
      os.link(tmp, self.path)
    except FileExistsError:
      return False
    finally:
      tmp.unlink()
    return True

  def _renew(self) -> None:
    while not self._stop.wait(self.renew_s):
      holder = self._read()
      if holder is None or holder.get("run_id") != self.run_id:
        self.log(f"Workdir lease: {self.path} is no longer this run's; another run took it over.")
        return
      try:
        atomic_write_json(self.path, {**holder, "renewed": time.time()})
      except OSError:
        pass  # a full or read-only disk: the run's own writes report it

  def release(self) -> None:
    """Stops renewing and removes the lease if it is still this run's."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join()
    holder = self._read()
    if holder is not None and holder.get("run_id") == self.run_id:
      with contextlib.suppress(FileNotFoundError):
        self.path.unlink()

  def __enter__(self) -> "WorkdirLease":
    self.acquire()
    return self

  def __exit__(self, *exc: object) -> None:
    self.release()


@contextlib.contextmanager
def holding(workdir: str | os.PathLike, log: Callable[[str], None] = print) -> Iterator[WorkdirLease | None]:
  """Holds ``workdir``'s lease for the ``with`` block: in one process, this process's; in a multi-process run,
  process 0's, whose verdict every process follows (a refusal is a ConfigError on every process, so none
  is left waiting in a collective).

  Raises:
    ConfigError: the workdir is held by another live run.
  """
  import jax

  if jax.process_count() == 1:
    with WorkdirLease(workdir, log) as lease:
      yield lease
    return
  from jax.experimental import multihost_utils
  import numpy as np

  lease, refusal = None, None
  if jax.process_index() == 0:
    lease = WorkdirLease(workdir, log)
    try:
      lease.acquire()
    except ConfigError as e:
      lease, refusal = None, e
  ok = int(multihost_utils.broadcast_one_to_all(np.int32(refusal is None)))
  if refusal is not None:
    raise refusal
  if not ok:
    raise ConfigError("--workdir", str(workdir), "a workdir no other run is using: process 0 found it held "
                      "by another run (its log names the holder)")
  try:
    yield lease
  finally:
    if lease is not None:
      lease.release()


__all__ = ["LAPSE_S", "LEASE_FILE", "RENEW_S", "WorkdirLease", "holding"]
