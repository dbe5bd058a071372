"""The harness's side of the launcher protocol (:mod:`daca_jax.tasks.sandbox.launcher`).

The launcher gets one JSON object on its command line (:func:`launcher_argv`) and, when the program
ends, writes a one-line JSON report to the status pipe (``{"done", "exit", "signal", "setup_error",
"landlock_abi", "read_rules", "proc"}``). :func:`decode_report` reads that line and :func:`classify`
turns it into the run's :class:`~daca_jax.tasks.sandbox.limits.SandboxResult`. The report comes from
inside the sandbox, so a missing or malformed one is an ``error`` result, never an exception.
"""
from __future__ import annotations

import json
import pathlib
import shutil
import signal
import sys
from typing import Any, Callable

from daca_jax.tasks.sandbox.host import UNSHARE_ARGS
from daca_jax.tasks.sandbox.limits import ERROR, FAILED, PASSED, TIMEOUT, SandboxResult

LAUNCHER = pathlib.Path(__file__).with_name("launcher.py")


def launcher_argv(cfg: dict[str, Any], use_ns: bool) -> list[str]:
  """The command line that starts the launcher with ``cfg`` (inside ``unshare`` when ``use_ns``)."""
  argv = [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(cfg)]
  if use_ns:
    argv = [shutil.which("unshare") or "unshare", *UNSHARE_ARGS, "--", *argv]
  return argv


def read_capped(path: pathlib.Path, limit: int) -> str:
  """The first ``limit`` bytes of ``path`` decoded as UTF-8 (``replace``); "" when unreadable."""
  try:
    with open(path, "rb") as f:
      data = f.read(limit)
  except OSError:
    return ""
  return data.decode("utf-8", errors="replace")


def last_line(text: str, limit: int = 200) -> str:
  """The last non-blank line of ``text``, stripped and cut to ``limit`` characters."""
  lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
  line = lines[-1] if lines else ""
  return line if len(line) <= limit else line[:limit] + "..."


def decode_report(raw: bytes) -> dict:
  """The launcher's report: the JSON object on the last line of ``raw``; ``{}`` when there is none."""
  try:
    report = json.loads(raw.decode("utf-8", errors="replace").strip().splitlines()[-1])
    if not isinstance(report, dict):
      report = None
  except (ValueError, IndexError):
    report = None
  return report or {}


def classify(report: dict, make: Callable[..., SandboxResult], *, timed_out: bool, timeout_s: float,
             cpu_s: int, duration: float, returncode: int | None, stderr: str) -> SandboxResult:
  """The result of a finished run from the launcher's ``report``.

  Args:
    report: from :func:`decode_report`.
    make: builds the :class:`SandboxResult` from ``(status, message, exit_code=...)`` (the run's other
      fields already bound).
    timed_out: the wall-clock limit (``timeout_s``) ran out.
    cpu_s: the CPU-seconds limit that was set.
    duration: wall-clock seconds of the run.
    returncode: the launcher's exit status.
    stderr: the program's captured stderr (its last line explains a failure).
  """
  if timed_out:
    return make(TIMEOUT, f"wall-clock limit of {timeout_s:g} s exceeded")
  if not report:
    return make(ERROR, f"the sandbox launcher did not report (exit {returncode}): "
                       f"{last_line(stderr)}")
  if report.get("setup_error"):
    return make(ERROR, f"sandbox setup failed: {report['setup_error']}")
  if not report.get("done"):
    return make(FAILED, f"the sandbox ended before the program did: {last_line(stderr)}")
  sig = report.get("signal")
  if sig is not None:
    name = signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)
    if sig in (signal.SIGXCPU, signal.SIGKILL) and report.get("exit") is None:
      # RLIMIT_CPU sends SIGXCPU at the soft limit and SIGKILL at the hard one.
      if sig == signal.SIGXCPU or duration >= 0.9 * cpu_s:
        return make(TIMEOUT, f"CPU time limit of {cpu_s} s exceeded ({name})")
    return make(FAILED, f"killed by {name}: {last_line(stderr)}")
  code = report.get("exit")
  if code == 0:
    return make(PASSED, "ok", exit_code=0)
  return make(FAILED, f"exit code {code}: {last_line(stderr)}", exit_code=code)
