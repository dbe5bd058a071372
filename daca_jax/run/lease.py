"""One run per workdir at a time: the lease a run holds on its workdir while it trains.

Two ``train.py`` commands on one workdir (a preempted job relaunched while its old VM still runs, a
command pasted twice) would each train, overwrite each other's checkpoints and metrics, and read each
other's cached evaluations as their own. So a run takes ``<workdir>/lease.json`` before it writes
anything there, naming the holder: host, boot id and pid namespace (what makes a pid meaningful), pid
and that process's start time (so a reused pid is not taken for the holder), a run id, the start time,
and the last renewal, which a background thread refreshes every :data:`RENEW_S` seconds. A second run
finds the file and is refused with one line naming the holder, before any work
(:func:`check_free` looks before the job touches a device; :func:`holding` takes it).

A lease is taken over, and the run says so, when its holder is dead (the same machine and pid
namespace, and that pid is gone or is another process now) or its renewal has lapsed (:data:`LAPSE_S`:
a holder elsewhere that stopped, a killed VM or container). Every read-decide-write of the file (taking,
taking over, renewing, releasing) happens under a short-lived mutex file (``lease.lock``, created only
if absent), so two runs cannot both take over one stale lease. A run whose lease was taken over (it
stopped renewing: a hung or suspended process) stops at its next step without saving
(:func:`check_held`). A run releases its lease when it ends, however it ends short of ``kill -9``
(finished, an error, SIGTERM's checkpoint-and-exit). In a multi-process run process 0 holds the lease
for the whole run and tells the other processes whether they may go on.

On a ``gs://`` workdir the two files are objects (:mod:`daca_jax.storage`): the mutex is an upload that GCS
performs only if no such object exists (``ifGenerationMatch=0``), the lease a whole-object write, and a
holder's age its renewal record (or the object's update time).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
import socket
import stat
import threading
import time
import uuid
from typing import Any, Callable, Iterator

from daca_jax import storage
from daca_jax.errors import ConfigError
from daca_jax.io_utils import atomic_write_json

LEASE_FILE = "lease.json"
MUTEX_FILE = "lease.lock"
RENEW_S = 30.0  # how often the holder refreshes "renewed"
LAPSE_S = 600.0  # a lease not renewed for this long is stale (its holder stopped without releasing it)
MUTEX_STALE_S = 60.0  # a mutex file older than this was left by a process killed while holding it
CLOCK_SKEW_S = 60.0  # a renewal further in the future than this is not believed (the file's time is used)
MAX_BYTES = 1 << 16
FORMAT = 1


def _read_small(path: str) -> str | None:
  try:
    return pathlib.Path(path).read_text(encoding="ascii").strip()
  except (OSError, UnicodeDecodeError):
    return None


def _machine() -> dict[str, Any]:
  """What identifies this process's pid space: host name, boot id, pid namespace (the last two None off Linux)."""
  try:
    pid_ns = os.readlink("/proc/self/ns/pid")
  except OSError:
    pid_ns = None
  return {"host": socket.gethostname(), "boot_id": _read_small("/proc/sys/kernel/random/boot_id"), "pid_ns": pid_ns}


def _process_start(pid: int) -> str | None:
  """The start time of process ``pid`` (clock ticks since boot, ``/proc/<pid>/stat`` field 22), None where
  unreadable (no such process, not Linux)."""
  text = _read_small(f"/proc/{pid}/stat")
  if text is None or ")" not in text:
    return None
  fields = text.rsplit(")", 1)[1].split()
  return fields[19] if len(fields) > 19 else None


def _alive(holder: dict[str, Any]) -> bool | None:
  """Whether the holder process runs (True / False); None when this process cannot tell (another machine,
  boot or pid namespace: a container with the same host name), which leaves the lapse rule to decide."""
  here = _machine()
  if any(holder.get(k) != here[k] for k in ("host", "boot_id", "pid_ns")):
    return None
  pid = holder.get("pid")
  if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
    return False
  if here["boot_id"] is not None:  # Linux: the pid's entry and its start time
    started = _process_start(pid)
    return started is not None and started == holder.get("pid_start")  # a reused pid is another process
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def _read(path: Any) -> dict[str, Any] | None:
  """The lease at ``path``: None when there is none, ``{}`` when it is unreadable (cut short, another format,
  too long).

  Raises:
    ConfigError: ``path`` is not a regular file (a folder, a symlink, a pipe): nothing a run wrote.
  """
  if storage.is_remote(path):  # an object: no links or pipes, and a folder is a prefix beside it
    try:
      data = storage.read_bytes(path, limit=MAX_BYTES)
    except FileNotFoundError:
      return None
    except IsADirectoryError:  # a prefix of that name: nothing a run wrote
      return {}
    # Any other OSError (the bucket unreachable, a 5xx) propagates: it says nothing about who holds the lease,
    # and a renewal that read it as "unreadable" would give the lease up.
    return _parse(data)
  try:
    info = os.lstat(path)
  except FileNotFoundError:
    return None
  if not stat.S_ISREG(info.st_mode):
    raise ConfigError("--workdir", str(path.parent), f"a workdir whose {path.name} is a file a run wrote; "
                      f"{path} is not a regular file (a folder, a symlink or a pipe): remove it")
  try:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
  except FileNotFoundError:
    return None
  except OSError:
    return {}
  with os.fdopen(fd, "rb") as f:
    data = f.read(MAX_BYTES + 1)
  return _parse(data)


def _parse(data: bytes) -> dict[str, Any]:
  """A lease file's record, ``{}`` when it is not one."""
  try:
    holder = json.loads(data.decode("utf-8")) if len(data) <= MAX_BYTES else None
  except (ValueError, UnicodeDecodeError):
    holder = None
  return holder if isinstance(holder, dict) else {}


def _renewed(holder: dict[str, Any], path: pathlib.Path, now: float) -> float:
  """When the lease was last renewed: its own record, unless missing or in the future (a clock ahead), then
  the file's modification time."""
  renewed = holder.get("renewed")
  if isinstance(renewed, (int, float)) and not isinstance(renewed, bool) and math.isfinite(renewed) and (
      renewed <= now + CLOCK_SKEW_S):
    return float(renewed)
  try:
    mtime = storage.mtime(path)
  except OSError:
    return 0.0
  return mtime if mtime is not None and mtime <= now + CLOCK_SKEW_S else 0.0


def _describe(holder: dict[str, Any], path: pathlib.Path, now: float) -> str:
  if not holder:
    return f"a lease file this version cannot read, last written {now - _renewed(holder, path, now):.0f} s ago"
  return (f"run {holder.get('run_id', '?')} (host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, "
          f"started {holder.get('started_at', '?')}, renewed {now - _renewed(holder, path, now):.0f} s ago)")


def _refusal(workdir: pathlib.Path, holder: dict[str, Any], lapse_s: float) -> ConfigError | None:
  """The error for a lease held by a live run, None when it may be taken over."""
  path = workdir / LEASE_FILE
  now = time.time()
  alive = _alive(holder) if holder else None
  lapsed = now - _renewed(holder, path, now) > lapse_s
  if alive is True or (alive is None and not lapsed):
    wait = max(0.0, lapse_s - (now - _renewed(holder, path, now)))
    return ConfigError("--workdir", str(workdir), f"a workdir no other run is using: {_describe(holder, path, now)} "
                       f"holds it ({path}); wait for that run, stop it, or use another --workdir (a lease not "
                       f"renewed is taken over after {lapse_s:.0f} s: {wait:.0f} s from now)")
  return None


@contextlib.contextmanager
def _mutex(workdir: Any, run_id: str) -> Iterator[None]:
  """Holds ``workdir/lease.lock`` (created only if absent: ``O_EXCL`` locally, an upload with the precondition
  "no such object" on ``gs://``) around one read-decide-write of the lease.

  Raises:
    ConfigError: another run holds it (it is taking or releasing the lease).
  """
  path = workdir / MUTEX_FILE
  for attempt in range(20):
    try:
      storage.create_new(path, run_id.encode("ascii"))
    except FileExistsError:
      made = storage.mtime(path)
      if made is None:
        continue
      if time.time() - made > MUTEX_STALE_S:  # left by a process killed inside
        with contextlib.suppress(FileNotFoundError):
          storage.remove(path)
        continue
      time.sleep(0.05 * (attempt + 1))
      continue
    try:
      yield
    finally:
      with contextlib.suppress(FileNotFoundError):
        storage.remove(path)
    return
  raise ConfigError("--workdir", str(workdir), f"a workdir no other run is using: another run is taking or "
                    f"releasing its lease ({path}); try again in a minute")


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
    self.workdir = storage.as_path(workdir)
    self.path = self.workdir / LEASE_FILE
    self.log, self.lapse_s, self.renew_s = log, lapse_s, renew_s
    self.run_id = uuid.uuid4().hex[:12]
    self.lost: str | None = None  # who took the lease over, once it happened
    self._stop = threading.Event()
    self._thread: threading.Thread | None = None

  def _record(self) -> dict[str, Any]:
    now = time.time()
    return {"format": FORMAT, "run_id": self.run_id, **_machine(), "pid": os.getpid(),
            "pid_start": _process_start(os.getpid()),
            "started_at": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)), "renewed": now}

  def acquire(self) -> None:
    """Takes the lease, or takes over a stale one (said in one line), and starts renewing it.

    Raises:
      ConfigError: ``--workdir`` is held by a live run (the message names it), or its lease file is not a
        regular file.
    """
    with _mutex(self.workdir, self.run_id):
      holder = _read(self.path)
      if holder is not None:
        refusal = _refusal(self.workdir, holder, self.lapse_s)
        if refusal is not None:
          raise refusal
        now = time.time()
        why = "its process is gone" if _alive(holder) is False else f"not renewed for {self.lapse_s:.0f} s"
        self.log(f"Workdir lease: taking over {self.path} from {_describe(holder, self.path, now)}: {why}.")
      atomic_write_json(self.path, self._record())
    self._thread = threading.Thread(target=self._renew, name="workdir-lease", daemon=True)
    self._thread.start()

  def _renew(self) -> None:
    failing_since: float | None = None
    while not self._stop.wait(self.renew_s):
      try:
        with _mutex(self.workdir, self.run_id):
          holder = _read(self.path)
          if not holder or holder.get("run_id") != self.run_id:
            self.lost = _describe(holder, self.path, time.time()) if holder else "a run that removed it"
            self.log(f"Workdir lease: {self.path} was taken over by {self.lost}; this run stops at its next step.")
            return
          atomic_write_json(self.path, {**holder, "renewed": time.time()})
        if failing_since is not None:
          self.log(f"Workdir lease: renewed again after {time.time() - failing_since:.0f} s of failures.")
        failing_since = None
      except Exception as e:  # noqa: BLE001  (the thread must outlive any one failure: the next round retries)
        # A busy mutex, a full disk, a bucket's 5xx or a dropped connection: the lapse is 20 renewals. The first
        # failure of a streak is logged, so a lease that stops being renewed never goes unnoticed.
        if failing_since is None:
          failing_since = time.time()
          if not isinstance(e, ConfigError):
            self.log(f"Workdir lease: renewing {self.path} failed ({type(e).__name__}: "
                     f"{(str(e).strip().splitlines() or [''])[0][:200]}); retrying every {self.renew_s:.0f} s.")

  def check(self) -> None:
    """Raises if another run took this run's lease over (it must stop without saving).

    Raises:
      ConfigError: naming the run that holds the workdir now.
    """
    if self.lost is not None:
      raise ConfigError("--workdir", str(self.workdir), f"a workdir this run still holds: {self.lost} took it "
                        "over while this run was not renewing its lease; stopped without saving")

  def release(self) -> None:
    """Stops renewing and removes the lease if it is still this run's."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join()
    try:
      with _mutex(self.workdir, self.run_id):
        holder = _read(self.path)
        if holder is not None and holder.get("run_id") == self.run_id:
          with contextlib.suppress(FileNotFoundError):
            storage.remove(self.path)
    except ConfigError:
      pass  # the mutex stayed busy: the lease lapses by itself
    except OSError as e:  # the bucket unreachable at the end: not worth failing a finished run for
      self.log(f"Workdir lease: could not remove {self.path} ({e}); it lapses {self.lapse_s:.0f} s after its "
               "last renewal.")

  def __enter__(self) -> "WorkdirLease":
    self.acquire()
    return self

  def __exit__(self, *exc: object) -> None:
    self.release()


_HELD: list[WorkdirLease] = []  # the lease this process's run holds (process 0 of a multi-process run)


def check_free(workdir: str | os.PathLike, lapse_s: float = LAPSE_S) -> None:
  """Looks (without taking it) whether ``workdir`` is held by a live run: a cheap refusal before the job
  touches a device or reads weights. :func:`holding` takes the lease and settles races.

  Raises:
    ConfigError: as :meth:`WorkdirLease.acquire` would.
  """
  workdir = storage.as_path(workdir)
  holder = _read(workdir / LEASE_FILE)
  refusal = None if holder is None else _refusal(workdir, holder, lapse_s)
  if refusal is not None:
    raise refusal


def check_held() -> None:
  """At a step boundary: raises if this process's run lost its workdir's lease (:meth:`WorkdirLease.check`);
  nothing when it holds none (not the job, or not process 0)."""
  for lease in _HELD:
    lease.check()


@contextlib.contextmanager
def holding(workdir: str | os.PathLike, log: Callable[[str], None] = print) -> Iterator[WorkdirLease | None]:
  """Holds ``workdir``'s lease for the ``with`` block: in one process, this process's; in a multi-process run,
  process 0's, whose verdict every process follows (a refusal or any failure to take it is an error on every
  process, so none is left waiting in a collective).

  Raises:
    ConfigError: the workdir is held by another live run.
  """
  import jax

  lease, failure = None, None
  if jax.process_index() == 0:
    lease = WorkdirLease(workdir, log)
    try:
      lease.acquire()
    except BaseException as e:  # noqa: BLE001  (told to the other processes first, then raised)
      lease, failure = None, e
  if jax.process_count() > 1:
    import numpy as np
    from jax.experimental import multihost_utils

    ok = int(multihost_utils.broadcast_one_to_all(np.int32(failure is None)))
    if failure is None and not ok:
      raise ConfigError("--workdir", str(workdir), "a workdir process 0 could take: it could not (its log "
                        "says why: held by another run, or unwritable)")
  if failure is not None:
    raise failure
  if lease is not None:
    _HELD.append(lease)
  try:
    yield lease
  finally:
    if lease is not None:
      _HELD.remove(lease)
      lease.release()


__all__ = ["LAPSE_S", "LEASE_FILE", "MUTEX_FILE", "RENEW_S", "WorkdirLease", "check_free", "check_held", "holding"]
