"""Runs the documentation tables' commands (:mod:`daca_jax.reports.doc_tables`, which re-exports these names).

The commands (``python experiments/<script>.py [flags]``) run in one worker process (:func:`serve`) that
imports the modules the scripts import once and forks a child per command, so each command runs as from
a shell (its own absl flags, its own exit status) without paying JAX's import for every table; where
``fork`` is unavailable each command is a subprocess of its own. Every command sees ``JAX_PLATFORMS=cpu``.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import os
import pathlib
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Iterable, Sequence

from daca_jax.errors import DataError

ROOT = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT_S = 300.0  # per command: a table is read from a results file, never computed
TAIL_CHARS = 1500  # characters of a failed command's stderr quoted in the error


class TableError(DataError):
  """A marker that cannot be used (unclosed, a command outside experiments/) or a command that failed;
  the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class Output:
  """What one command printed, and its exit status (negative: killed by that signal)."""

  stdout: str
  stderr: str
  returncode: int


def run_commands(argvs: Iterable[Sequence[str]], root: pathlib.Path = ROOT,
                 timeout_s: float = TIMEOUT_S) -> dict[tuple[str, ...], Output]:
  """Runs each distinct command (``python experiments/<script>.py ...``) from ``root`` in one worker
  process (:func:`serve`); ``{argv: Output}``.

  Raises:
    TableError: the worker itself failed (its stderr quoted).
  """
  unique = list(dict.fromkeys(tuple(a) for a in argvs))
  if not unique:
    return {}
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join([str(root)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
  with tempfile.TemporaryDirectory() as tmp:
    request, result = pathlib.Path(tmp) / "request.json", pathlib.Path(tmp) / "result.json"
    request.write_text(json.dumps({"root": str(root), "commands": unique, "timeout_s": timeout_s}))
    proc = subprocess.run([sys.executable, "-c", f"from {__name__} import serve; serve()", str(request),
                           str(result)], cwd=root, env=env, capture_output=True, text=True,
                          timeout=timeout_s * len(unique) + 120)
    if proc.returncode != 0 or not result.exists():
      raise TableError(f"the table worker failed (exit {proc.returncode}):\n{proc.stderr[-TAIL_CHARS:]}")
    outputs = json.loads(result.read_text())
  return {argv: Output(**o) for argv, o in zip(unique, outputs)}


def _preload(script: pathlib.Path) -> None:
  """Imports the modules ``script`` imports at its top level (a child forked afterwards finds them
  loaded); a module that fails to import is left to the command, which reports it."""
  try:
    tree = ast.parse(script.read_text(encoding="utf-8"))
  except (OSError, SyntaxError):
    return
  for node in tree.body:
    names = []
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    for name in names:
      try:
        importlib.import_module(name)
      except Exception:  # pylint: disable=broad-except  # an attribute, not a module; or the command's error
        pass


def _exit_status(e: SystemExit) -> int:
  """The exit status Python gives a process leaving with ``e``."""
  if e.code is None:
    return 0
  if isinstance(e.code, int):
    return e.code
  print(e.code, file=sys.stderr)
  return 1


def _run_forked(argv: Sequence[str], root: pathlib.Path, timeout_s: float) -> Output:
  """``argv`` run in a forked child as ``python`` would run it, its output captured."""
  script = root / argv[1]
  with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
      status = 1
      try:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        os.chdir(root)
        sys.argv = [str(script), *argv[2:]]
        # `python <script>` would also put the script's folder first on sys.path; the scripts import
        # only installed packages (daca_jax, configs), so a sibling import fails here rather than pass.
        runpy.run_path(str(script), run_name="__main__")
        status = 0
      except SystemExit as e:
        status = _exit_status(e)
      except BaseException:  # pylint: disable=broad-except  # reported as python would, in the output
        traceback.print_exc()
      finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)  # pylint: disable=protected-access  # no parent's atexit handlers in the child
    deadline = time.monotonic() + timeout_s
    while True:
      done, status = os.waitpid(pid, os.WNOHANG)
      if done:
        break
      if time.monotonic() > deadline:
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        err.seek(0, 2)
        err.write(f"\ntimed out after {timeout_s:.0f} s".encode())
        break
      time.sleep(0.01)
    out.seek(0)
    err.seek(0)
    return Output(out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"),
                  os.waitstatus_to_exitcode(status))


def _run_subprocess(argv: Sequence[str], root: pathlib.Path, timeout_s: float) -> Output:
  try:
    proc = subprocess.run([sys.executable, *argv[1:]], cwd=root, capture_output=True, text=True,
                          timeout=timeout_s)
  except subprocess.TimeoutExpired as e:
    return Output(str(e.stdout or ""), f"{e.stderr or ''}\ntimed out after {timeout_s:.0f} s", -signal.SIGKILL)
  return Output(proc.stdout, proc.stderr, proc.returncode)


def serve() -> None:
  """The worker of :func:`run_commands`: ``sys.argv[1]`` is a request file ``{"root", "commands",
  "timeout_s"}``; writes the list of outputs (``{"stdout", "stderr", "returncode"}``, in order) to
  ``sys.argv[2]``."""
  request = json.loads(pathlib.Path(sys.argv[1]).read_text())
  root, timeout_s = pathlib.Path(request["root"]), float(request["timeout_s"])
  commands = [tuple(c) for c in request["commands"]]
  for script in dict.fromkeys(root / c[1] for c in commands):
    _preload(script)
  # A fork is safe while this process has one thread (importing JAX starts none; using it would).
  forked = hasattr(os, "fork") and threading.active_count() == 1
  outputs = [(_run_forked if forked else _run_subprocess)(c, root, timeout_s) for c in commands]
  pathlib.Path(sys.argv[2]).write_text(json.dumps([dataclasses.asdict(o) for o in outputs]))
