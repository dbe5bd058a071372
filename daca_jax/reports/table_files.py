"""Results tables kept as data: one JSON file under ``docs/results/`` per measured table that no study's
results file records (a benchmark run's printout, a measurement made before its results were kept),
holding the table's values and where they come from. ``python experiments/tables.py --render=FILE``
prints it as the documentation's markdown table (:mod:`daca_jax.reports.doc_tables` keeps the two equal).

File format::

  {"what": "what the table measures",
   "measured_by": "the command (or test) that measured it",
   "date": "when (ISO date; or the commit that first recorded it)",
   "machine": "where, as the documentation states it",
   "notes": "anything else a reader of the numbers needs (optional)",
   "columns": ["name", ...],
   "align": ["left" | "right", ...],           # optional, one per column (default left)
   "formats": ["" | "<format spec>", ...],      # optional, one per column: how numbers are printed
   "rows": [[cell, ...], ...]}

A cell is a string (printed as it is) or a number (printed with its column's ``formats`` entry, a
Python format spec such as ``".3f"``; ``""`` or no entry: as JSON wrote it).
"""
from __future__ import annotations

import json
import pathlib
from typing import Any

from daca_jax.errors import DataError
from daca_jax.io_utils import read_json

PROVENANCE = ("what", "measured_by", "date", "machine")
_ALIGN = {"left": "---", "right": "---:"}


def read_table_file(path: str | pathlib.Path) -> dict[str, Any]:
  """The validated contents of a table file (format: the module docstring).

  Raises:
    FileNotFoundError: no such file.
    DataError: a folder, not JSON, or a field missing or of the wrong kind (the file and the field named).
  """
  data = read_json(path, fix="give a table file (docs/results/*.json)", kind=None)

  def bad(field: str, allowed: str) -> DataError:
    return DataError(f"{path}: {field} must be {allowed}")

  if not isinstance(data, dict):
    raise bad("the file", "an object with the fields " + ", ".join(PROVENANCE + ("columns", "rows")))
  for field in PROVENANCE:
    if not isinstance(data.get(field), str) or not data[field].strip():
      raise bad(f"'{field}'", "a non-empty string (where the numbers come from)")
  columns = data.get("columns")
  if not isinstance(columns, list) or not columns or not all(isinstance(c, str) for c in columns):
    raise bad("'columns'", "a non-empty list of column names")
  for field, allowed, ok in (("align", "'left' or 'right'", lambda v: v in _ALIGN),
                             ("formats", "a format spec string", lambda v: isinstance(v, str))):
    if field in data and (not isinstance(data[field], list) or len(data[field]) != len(columns)
                          or not all(ok(v) for v in data[field])):
      raise bad(f"'{field}'", f"a list of {len(columns)} entries, each {allowed}")
  rows = data.get("rows")
  if not isinstance(rows, list) or not rows:
    raise bad("'rows'", "a non-empty list of rows")
  for i, row in enumerate(rows):
    if not isinstance(row, list) or len(row) != len(columns):
      raise bad(f"rows[{i}]", f"a list of {len(columns)} cells (one per column)")
    for j, cell in enumerate(row):
      if isinstance(cell, bool) or not isinstance(cell, (str, int, float)):
        raise bad(f"rows[{i}][{j}]", f"a string or a number, not {cell!r}")
  return data


def render_table(data: dict[str, Any]) -> str:
  """The markdown table of a table file's contents (:func:`read_table_file`); ``|`` in a cell escaped."""
  columns = data["columns"]
  formats = data.get("formats", [""] * len(columns))

  def cell(value: Any, fmt: str) -> str:
    text = value if isinstance(value, str) else format(value, fmt) if fmt else json.dumps(value)
    return text.replace("|", "\\|")

  lines = ["| " + " | ".join(cell(c, "") for c in columns) + " |",
           "|" + "|".join(_ALIGN[a] for a in data.get("align", ["left"] * len(columns))) + "|"]
  lines += ["| " + " | ".join(cell(v, f) for v, f in zip(row, formats)) + " |" for row in data["rows"]]
  return "\n".join(lines)


__all__ = ["PROVENANCE", "read_table_file", "render_table"]
