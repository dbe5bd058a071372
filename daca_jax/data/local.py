"""Loaders for benchmark files stored on the local disk (no downloads).

The project's shared benchmark files live at ``<repo root>/../shared/data`` (see its SOURCES.md);
``$DACA_DATA_DIR`` overrides that location. The tasks (:mod:`daca_jax.tasks`) read their files through
these functions; this module imports nothing of daca_jax but :mod:`daca_jax.errors`.
"""
from __future__ import annotations

import csv
import io
import json
import os
import pathlib
from typing import Any

from daca_jax.errors import DataError

DATA_DIR_ENV = "DACA_DATA_DIR"

_SUDOKU_CELLS = 16


def default_data_dir() -> pathlib.Path:
  """Returns the default data directory.

  Returns:
    ``$DACA_DATA_DIR`` when that environment variable is set and non-empty, else
    ``<repo root>/../shared/data`` where the repo root is the parent of the ``daca_jax`` package
    directory. The directory may not exist.
  """
  env = os.environ.get(DATA_DIR_ENV, "")
  if env:
    return pathlib.Path(env).expanduser()
  repo_root = pathlib.Path(__file__).resolve().parents[2]  # <repo>/daca_jax/data/local.py
  return repo_root.parent / "shared" / "data"


def resolve_data_dir(configured: str) -> pathlib.Path | None:
  """Resolves the config field ``data.data_dir`` to a directory.

  Args:
    configured: the configured path; ``""`` means "the default, if present".

  Returns:
    ``default_data_dir()`` when ``configured`` is empty and that directory exists; ``None`` when
    it is empty and the default does not exist; otherwise ``Path(configured)``.

  Raises:
    FileNotFoundError: ``configured`` is non-empty and is not an existing directory; the message
      names ``data.data_dir`` and the path.
  """
  if not configured:
    default = default_data_dir()
    return default if default.is_dir() else None
  path = pathlib.Path(configured).expanduser()
  if not path.exists():
    raise FileNotFoundError(f"data.data_dir={configured!r}: directory {str(path)!r} does not exist")
  if not path.is_dir():
    raise FileNotFoundError(f"data.data_dir={configured!r}: {str(path)!r} is not a directory")
  return path


def _check_grid(text: str, allowed: str, what: str, where: str) -> None:
  if len(text) != _SUDOKU_CELLS or any(c not in allowed for c in text):
    raise DataError(
        f"{where}: {what} {text!r} must be {_SUDOKU_CELLS} digits in {allowed[0]}..{allowed[-1]}")


def read_sudoku_csv(path: str | os.PathLike[str]) -> list[tuple[str, str]]:
  """Reads a 4x4 Sudoku CSV in d1's ``4x4_test_sudoku.csv`` layout.

  The file has a header naming the columns ``Puzzle`` and ``Solution`` (other columns are
  ignored); each row holds a puzzle (16 digits row-major, ``0`` = blank) and its solution
  (16 digits in 1..4). Blank lines are skipped.

  Source of the layout: dllm-reasoning/d1 ``dataset/4x4_test_sudoku.csv``.

  Args:
    path: the CSV file.

  Returns:
    ``list[(puzzle, solution)]`` in file order.

  Raises:
    FileNotFoundError: ``path`` does not exist.
    ValueError: missing header columns, a malformed row, a cell that is not a digit of the
      allowed range, or a solution that changes a given of its puzzle; the message names the file
      and the line number.
  """
  path = pathlib.Path(path)
  text = _read_text(path)
  reader = csv.reader(io.StringIO(text, newline=""))
  try:
    return _sudoku_rows(reader, path)
  except csv.Error as e:  # e.g. a line longer than csv.field_size_limit(): not a d1 Sudoku file
    raise DataError(f"{path}:{reader.line_num}: not a valid CSV row ({e}); expected the "
                    "'Puzzle,Solution' layout of d1's 4x4_test_sudoku.csv") from None


def _sudoku_rows(reader: Any, path: pathlib.Path) -> list[tuple[str, str]]:
  """The rows of :func:`read_sudoku_csv` from a ``csv.reader``; raises DataError / csv.Error."""
  rows: list[tuple[str, str]] = []
  header = next(reader, None)
  if header is None:
    raise DataError(f"{path}: empty file, expected a header 'Puzzle,Solution'")
  names = [h.strip() for h in header]
  if "Puzzle" not in names or "Solution" not in names:
    raise DataError(f"{path}:1: header {header!r} must name the columns 'Puzzle' and 'Solution'")
  i_p, i_s = names.index("Puzzle"), names.index("Solution")
  for fields in reader:
    where = f"{path}:{reader.line_num}"
    if not fields or all(not x.strip() for x in fields):
      continue
    if len(fields) != len(names):
      raise DataError(f"{where}: expected {len(names)} fields, got {len(fields)}: {fields!r}")
    rows.append(check_sudoku_row(fields[i_p].strip(), fields[i_s].strip(), where))
  return rows


def check_sudoku_row(puzzle: Any, solution: Any, where: str) -> tuple[str, str]:
  """``(puzzle, solution)`` of one d1 Sudoku row once checked: 16 digits each (``0`` = blank in the
  puzzle, 1..4 in the solution), and no given changed by the solution.

  Raises:
    DataError: naming ``where`` and what is wrong.
  """
  for text, what in ((puzzle, "puzzle"), (solution, "solution")):
    if not isinstance(text, str):
      raise DataError(f"{where}: {what} {text!r} must be a string of {_SUDOKU_CELLS} digits")
  _check_grid(puzzle, "01234", "puzzle", where)
  _check_grid(solution, "1234", "solution", where)
  for cell, (p, s) in enumerate(zip(puzzle, solution)):
    if p != "0" and p != s:
      raise DataError(
          f"{where}: solution {solution!r} changes given {p!r} at cell {cell} of puzzle "
          f"{puzzle!r}")
  return puzzle, solution


def read_json_records(path: str | os.PathLike[str]) -> list[dict]:
  """Reads a list of JSON objects: JSON Lines (one object per line) or one JSON array.

  Used for d1's Countdown file (JSONL), GSM8K (JSONL) and MATH500 (a JSON array).

  Args:
    path: the file (``.jsonl``: one object per non-blank line; otherwise a JSON array of objects).

  Returns:
    The objects in file order.

  Raises:
    FileNotFoundError: ``path`` does not exist.
    DataError: the file is not UTF-8, a line / the document is not valid JSON, or a record is not a
      JSON object; the message names the file and the line (or record index).
  """
  path = pathlib.Path(path)
  text = _read_text(path)
  if path.suffix == ".jsonl":
    records = []
    for line_no, line in enumerate(text.splitlines(), start=1):
      if not line.strip():
        continue
      try:
        records.append(json.loads(line))
      except json.JSONDecodeError as e:
        raise DataError(f"{path}:{line_no}: invalid JSON ({e.msg})") from None
      if not isinstance(records[-1], dict):
        raise DataError(f"{path}:{line_no}: expected a JSON object, got {type(records[-1]).__name__}")
    return records
  try:
    records = json.loads(text)
  except json.JSONDecodeError as e:
    raise DataError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
  if not isinstance(records, list):
    raise DataError(f"{path}: expected a JSON array of objects, got {type(records).__name__}")
  for i, r in enumerate(records):
    if not isinstance(r, dict):
      raise DataError(f"{path}: record {i} is a {type(r).__name__}, expected a JSON object")
  return records


def read_text_folder(folder: str | os.PathLike[str], pattern: str) -> list[tuple[str, str | None]]:
  """``(file name, text)`` of each file of ``folder`` matching ``pattern``, sorted by name (JSONSchemaBench:
  one schema per ``*.json``); the text is None for a file that is not UTF-8, which its parser reports
  (one bad file does not fail the folder).

  Raises:
    DataError: ``folder`` is not a folder.
  """
  folder = pathlib.Path(folder)
  if not folder.is_dir():
    raise DataError(f"{folder}: not a folder")
  return [(path.name, _utf8(_readable(path, path.read_bytes))) for path in sorted(folder.glob(pattern))]


def _readable(path: pathlib.Path, read: Any) -> Any:
  """``read()``, with a file the process may not read reported as bad input naming it (not as a workdir
  to write elsewhere, what a permission error means for the job's own files)."""
  try:
    return read()
  except PermissionError:
    raise DataError(f"{path}: permission denied reading a benchmark file (data.data_dir / task.eval_path)") from None


def _read_text(path: pathlib.Path) -> str:
  data = _readable(path, path.read_bytes)
  try:
    return data.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _utf8(data: bytes) -> str | None:
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError:
    return None
