"""The documentation's results tables, each the output of the command written in its marker.

A results table in README.md or ``docs/**/*.md`` is wrapped as::

  <!-- table: python experiments/variants_table.py --reference="X" --arms="a,b" -->
  | ... the command's standard output ... |
  <!-- /table -->

The text after ``table:`` is a command as a shell would split it (:func:`shlex.split`):
``python experiments/<script>.py [flags]``, run from the repository root, whose standard output is
the block's body (trailing newlines dropped; an indented marker indents its body alike). Markers
inside fenced code blocks are text, not tables. :func:`refresh_docs` runs every marker's command
and reports (or rewrites) each block whose body differs from its output; ``experiments/tables.py``
is its command line (``--check`` changes nothing).

The commands run in one worker process (:func:`serve`) that imports the modules the scripts import
once and forks a child per command, so each command runs as from a shell (its own absl flags, its
own exit status) without paying JAX's import for every table; where ``fork`` is unavailable each
command is a subprocess of its own. Every command sees ``JAX_PLATFORMS=cpu``.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import importlib
import json
import os
import pathlib
import re
import runpy
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Iterable, Mapping, Sequence

from daca_jax.errors import DataError
from daca_jax.io_utils import atomic_write_text

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC_GLOBS = ("README.md", "docs/**/*.md")
OPEN_MARK, CLOSE_MARK = "<!-- table: ", "<!-- /table -->"
_OPEN = re.compile(r"^(?P<indent>[ \t]*)<!--\s*table:(?P<command>.*?)-->\s*$")
_OPEN_LOOSE = re.compile(r"^[ \t]*<!--\s*table\b")  # an opening marker, well formed or not
_CLOSE = re.compile(r"^[ \t]*<!--\s*/table\s*-->\s*$")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")
_SCRIPT = re.compile(r"^experiments/[A-Za-z0-9_]+\.py$")
TIMEOUT_S = 300.0  # per command: a table is read from a results file, never computed
_TAIL = 1500  # characters of a failed command's stderr quoted in the error


class TableError(DataError):
  """A marker that cannot be used (unclosed, a command outside experiments/) or a command that failed;
  the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class Block:
  """One marked table of a markdown text.

  Attributes:
    name: the file, as reported (relative to the repository root when inside it).
    line: 1-based line of the opening marker.
    command: the command as written in the marker.
    argv: its words (``python``, ``experiments/<script>.py``, flags).
    indent: the opening marker's indentation, given to every body line.
    body: the text between the markers (lines joined by ``\\n``).
    first: 0-based index of the body's first line (the line after the opening marker).
    last: 0-based index of the closing marker's line.
  """

  name: str
  line: int
  command: str
  argv: tuple[str, ...]
  indent: str
  body: str
  first: int
  last: int

  @property
  def where(self) -> str:
    return f"{self.name}:{self.line}"


def parse_command(command: str, where: str) -> tuple[str, ...]:
  """The words of a marker's command.

  Raises:
    TableError: not ``python experiments/<script>.py [flags]`` (or unbalanced quotes).
  """
  allowed = ("'python experiments/<script>.py [flags]' (a script under experiments/, run from the "
             "repository root)")
  try:
    argv = tuple(shlex.split(command))
  except ValueError as e:
    raise TableError(f"{where}: table command {command!r} cannot be split into words ({e})") from None
  if len(argv) < 2 or argv[0] != "python" or not _SCRIPT.match(argv[1]):
    raise TableError(f"{where}: table command {command!r} is not allowed: expected {allowed}")
  return argv


def find_blocks(text: str, name: str) -> list[Block]:
  """The marked tables of a markdown text, in order (markers in fenced code blocks are skipped).

  Raises:
    TableError: an opening marker without its ``<!-- /table -->`` (or with another opening marker
      before it), a closing marker without an opening one, a malformed opening marker, or a command
      :func:`parse_command` refuses; each names ``name:line``.
  """
  lines = text.split("\n")
  blocks: list[Block] = []
  fence = ""
  open_at: tuple[int, re.Match[str]] | None = None
  for i, line in enumerate(lines):
    f = _FENCE.match(line)
    if f and open_at is None:
      fence = "" if fence and f.group(1) == fence else fence or f.group(1)
      continue
    if fence:
      continue
    if _CLOSE.match(line):
      if open_at is None:
        raise TableError(f"{name}:{i + 1}: {CLOSE_MARK} closes no table (no {OPEN_MARK}... --> before it)")
      start, m = open_at
      where = f"{name}:{start + 1}"
      command = m.group("command").strip()
      blocks.append(Block(name, start + 1, command, parse_command(command, where), m.group("indent"),
                          "\n".join(lines[start + 1:i]), start + 1, i))
      open_at = None
    elif _OPEN_LOOSE.match(line):
      if open_at is not None:
        raise TableError(f"{name}:{open_at[0] + 1}: the table opened here has no {CLOSE_MARK} before the "
                         f"next table marker (line {i + 1})")
      m = _OPEN.match(line)
      if m is None or not m.group("command").strip():
        raise TableError(f"{name}:{i + 1}: malformed table marker {line.strip()!r}: expected "
                         f"'{OPEN_MARK}python experiments/<script>.py [flags] -->' on a line of its own")
      open_at = (i, m)
  if open_at is not None:
    raise TableError(f"{name}:{open_at[0] + 1}: the table opened here has no {CLOSE_MARK} (the file ends "
                     "first)")
  return blocks


def doc_files(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
  """README.md and ``docs/**/*.md`` of ``root``, sorted."""
  return sorted({p for g in DOC_GLOBS for p in root.glob(g) if p.is_file()})


# --- running the commands ------------------------------------------------------------------------------------


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
      raise TableError(f"the table worker failed (exit {proc.returncode}):\n{proc.stderr[-_TAIL:]}")
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


# --- comparing and rewriting ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Stale:
  """A block whose body differs from its command's output.

  Attributes:
    where: ``file:line`` of its opening marker.
    command: the marker's command.
    diff: the changed lines, ``-`` as written and ``+`` as printed (long lines cut around the change).
  """

  where: str
  command: str
  diff: str


@dataclasses.dataclass(frozen=True)
class Report:
  """The outcome of :func:`refresh_docs`: how many marked tables were read, and the stale ones."""

  tables: int
  stale: list[Stale]


def expected_body(block: Block, output: Output) -> str:
  """The body ``block`` should have: its command's standard output, indented like its marker.

  Raises:
    TableError: the command failed, or printed nothing (its exit status and stderr's tail quoted).
  """
  if output.returncode != 0 or not output.stdout.strip():
    what = f"failed (exit {output.returncode})" if output.returncode != 0 else "printed nothing"
    raise TableError(f"{block.where}: table command {block.command!r} {what}:\n"
                     f"{(output.stderr.strip() or output.stdout.strip())[-_TAIL:]}")
  return "\n".join(block.indent + ln if ln.strip() else "" for ln in output.stdout.rstrip("\n").split("\n"))


def _cut(line: str, at: int, width: int = 160) -> str:
  """``line``, or the ``width`` characters of it around index ``at`` when longer."""
  if len(line) <= width:
    return line
  start = max(0, min(at - width // 3, len(line) - width))
  return ("…" if start else "") + line[start:start + width] + ("…" if start + width < len(line) else "")


def short_diff(old: str, new: str, max_lines: int = 12) -> str:
  """The lines that differ between ``old`` and ``new`` (``-`` / ``+``), long lines cut around the first
  differing character."""
  a, b = old.split("\n"), new.split("\n")
  out: list[str] = []
  for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
    if tag == "equal":
      continue
    olds, news = a[i1:i2], b[j1:j2]
    for k in range(max(len(olds), len(news))):
      o, n = (olds[k] if k < len(olds) else None), (news[k] if k < len(news) else None)
      at = next((c for c, (x, y) in enumerate(zip(o or "", n or "")) if x != y), min(len(o or ""), len(n or "")))
      out += [f"- {_cut(o, at)}"] if o is not None else []
      out += [f"+ {_cut(n, at)}"] if n is not None else []
  if len(out) > max_lines:
    out = out[:max_lines] + [f"... ({len(out) - max_lines} more changed lines)"]
  return "\n".join(out)


def refresh_text(text: str, blocks: Sequence[Block],
                 outputs: Mapping[tuple[str, ...], Output]) -> tuple[str, list[Stale]]:
  """``text`` (whose marked tables are ``blocks``) with each body replaced by its command's output
  (``outputs[block.argv]``), and the blocks that changed.

  Raises:
    TableError: a command failed (:func:`expected_body`).
  """
  lines = text.split("\n")
  stale = []
  for block in reversed(blocks):
    body = expected_body(block, outputs[block.argv])
    if body != block.body:
      stale.append(Stale(block.where, block.command, short_diff(block.body, body)))
      lines[block.first:block.last] = body.split("\n")
  return "\n".join(lines), stale[::-1]


def refresh_docs(paths: Sequence[str | pathlib.Path] | None = None, *, root: pathlib.Path = ROOT,
                 write: bool = False) -> Report:
  """Checks (``write=False``) or rewrites in place (``write=True``) every marked table of ``paths``
  (default :func:`doc_files`); commands run from ``root``. Every marker is read before any command runs.

  Returns:
    The number of marked tables and the stale ones (with ``write``: the ones rewritten).

  Raises:
    TableError: a marker error (:func:`find_blocks`) or a failed command (:func:`expected_body`).
    FileNotFoundError: a path that does not exist.
  """
  files = [pathlib.Path(p) for p in (doc_files(root) if paths is None else paths)]
  texts, blocks = {}, {}
  for path in files:
    full = path.resolve()
    name = str(full.relative_to(root.resolve())) if full.is_relative_to(root.resolve()) else str(path)
    texts[path] = path.read_text(encoding="utf-8")
    blocks[path] = find_blocks(texts[path], name)
  every = [b for path in files for b in blocks[path]]
  outputs = run_commands((b.argv for b in every), root)
  new_texts, stale = {}, []
  for path in files:  # every command's failure raised before any file is written
    new_texts[path], changed = refresh_text(texts[path], blocks[path], outputs)
    stale += changed
  if write:
    for path in files:
      if new_texts[path] != texts[path]:
        atomic_write_text(path, new_texts[path])
  return Report(len(every), stale)


__all__ = ["Block", "DOC_GLOBS", "Output", "Report", "Stale", "TableError", "doc_files", "expected_body",
           "find_blocks", "parse_command", "refresh_docs", "refresh_text", "run_commands", "serve",
           "short_diff"]
