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

The commands run in one worker process (:func:`serve`, in :mod:`daca_jax.reports.table_commands` with the
rest of running them; re-exported here) that imports the modules the scripts import once and forks a child
per command. Every command sees ``JAX_PLATFORMS=cpu``.
"""
from __future__ import annotations

import dataclasses
import difflib
import pathlib
import re
import shlex
from typing import Mapping, Sequence

from daca_jax.io_utils import atomic_write_text
from daca_jax.reports.table_commands import ROOT, TAIL_CHARS, TIMEOUT_S, Output, TableError, run_commands, serve

DOC_GLOBS = ("README.md", "docs/**/*.md")
OPEN_MARK, CLOSE_MARK = "<!-- table: ", "<!-- /table -->"
_OPEN = re.compile(r"^(?P<indent>[ \t]*)<!--\s*table:(?P<command>.*?)-->\s*$")
_OPEN_LOOSE = re.compile(r"^[ \t]*<!--\s*table\b")  # an opening marker, well formed or not
_CLOSE = re.compile(r"^[ \t]*<!--\s*/table\s*-->\s*$")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")
_SCRIPT = re.compile(r"^experiments/[A-Za-z0-9_]+\.py$")


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
                     f"{(output.stderr.strip() or output.stdout.strip())[-TAIL_CHARS:]}")
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
    TableError: a folder given as a file, a marker error (:func:`find_blocks`) or a failed command
      (:func:`expected_body`).
    FileNotFoundError: a path that does not exist.
  """
  files = [pathlib.Path(p) for p in (doc_files(root) if paths is None else paths)]
  texts, blocks = {}, {}
  for path in files:
    if path.is_dir():  # else IsADirectoryError: exit 1 and no word on what to give
      raise TableError(f"{path} is a folder, not a markdown file")
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


__all__ = ["Block", "DOC_GLOBS", "TIMEOUT_S", "Output", "Report", "Stale", "TableError", "doc_files", "expected_body",
           "find_blocks", "parse_command", "refresh_docs", "refresh_text", "run_commands", "serve", "short_diff"]
