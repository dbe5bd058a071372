"""Resumable generation files: rows of finished batches, read back and checked against the
fingerprint of what produced them."""
from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Sequence

from daca_jax import storage
from daca_jax.errors import ConfigError, DataError
from daca_jax.io_utils import atomic_write_json, atomic_write_text, read_json
from daca_jax.tasks.base import Example


def jsonable(x: Any) -> Any:
  return json.loads(json.dumps(x, default=str))


def read_generations(path: str | os.PathLike) -> list[dict[str, Any]]:
  """Rows of a generations JSONL; a last line cut short by an interrupted write is ignored.

  Raises:
    DataError: a damaged line other than the last (names the file and line).
  """
  p = storage.as_path(path)
  if not p.exists():
    return []
  lines = p.read_text().split("\n")
  rows = []
  for i, line in enumerate(lines):
    if not line.strip():
      continue
    try:
      rows.append(json.loads(line))
    except json.JSONDecodeError:
      if i >= len(lines) - 2:  # the last line (possibly followed by nothing): half-written
        break
      raise DataError(f"{p}: line {i + 1} is not JSON; delete the file to regenerate it") from None
  return rows


def finished_rows(rows: list[dict[str, Any]], examples: Sequence[Example], batch_size: int,
                   path: pathlib.Path) -> dict[int, dict[str, Any]]:
  """Rows of the batches that were written completely, by example index."""
  by_index = {}
  for r in rows:
    i = r.get("index")
    if not isinstance(i, int) or not 0 <= i < len(examples):
      continue  # beyond --num_examples this time: kept on disk, not used
    if r.get("prompt") != examples[i].prompt:
      raise DataError(f"{path}: row {i} was generated for another prompt than the task's example {i}; "
                      "the evaluation data changed: use a new --output_dir")
    by_index[i] = r
  done = {}
  n = len(examples)
  for start in range(0, n, batch_size):
    idx = range(start, min(start + batch_size, n))
    if all(i in by_index for i in idx):
      done.update({i: by_index[i] for i in idx})
  return done


def write_rows(path: pathlib.Path, rows: Sequence[dict[str, Any]], mode: str) -> None:
  """Appends (``mode="a"``) or atomically replaces (``"w"``) the rows of a generations file."""
  text = "".join(json.dumps(r) + "\n" for r in rows)
  if mode != "a":
    atomic_write_text(path, text)
    return
  storage.append_bytes(path, text.encode("utf-8"))  # a row cut short by a kill is dropped by read_generations


def check_fingerprint(path: pathlib.Path, fingerprint: dict[str, Any], gen_path: pathlib.Path) -> None:
  if path.exists() and gen_path.exists():
    old = read_json(path, fix=f"it records what produced {gen_path.name}: delete both to regenerate them")
    if old != fingerprint:
      diff = sorted(k for k in set(old) | set(fingerprint) if old.get(k) != fingerprint.get(k))
      raise ConfigError("--output_dir", str(path.parent.parent),
                        f"a new folder, or the settings of the run already there (differs in {diff}: "
                        f"{ {k: old.get(k) for k in diff} } vs { {k: fingerprint.get(k) for k in diff} })")
  atomic_write_json(path, fingerprint)
