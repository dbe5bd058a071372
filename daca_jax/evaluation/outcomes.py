"""Per-example outcomes of an evaluation, kept beside its metrics so that arms can be compared example
by example (:mod:`daca_jax.reports.paired`).

File: ``<stem>.outcomes.jsonl`` beside the evaluation's cache or generations (``eval_after.json`` →
``eval_after.outcomes.jsonl``, ``gen256.jsonl`` → ``gen256.outcomes.jsonl``), written atomically, one
JSON object per evaluated example in the evaluated order::

  {"index": 0, "key": "3f0c5a9e1b2d4c67", "strict_solved": 1.0, "cell_accuracy": 1.0, ...}

* ``index``: the example's position in the evaluated set;
* ``key``: the first 16 hex digits of the SHA-256 of the prompt text (:func:`example_key`), so the same
  item in the same prompt style has the same key in every run, on every machine;
* the task's per-example outcomes (:meth:`daca_jax.tasks.base.Task.example_outcomes`): a rate of the
  evaluation's metrics is the mean of its column, a count the sum (Sudoku's ``cell_accuracy`` is
  Σ ``cells_correct`` / Σ ``cells_blank``).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import pathlib
from typing import Any, Sequence

from daca_jax import io_utils, storage
from daca_jax.errors import DataError
from daca_jax.tasks.base import Example, Task

SUFFIX = ".outcomes.jsonl"


def outcomes_path(path: str | os.PathLike) -> pathlib.Path:
  """The outcomes file of an evaluation whose cache (or generations file) is ``path``."""
  path = storage.as_path(path)
  return path.with_name(path.name.split(".", 1)[0] + SUFFIX)


def example_key(example: Example) -> str:
  """A stable key of an example: the first 16 hex digits of the SHA-256 of its prompt text."""
  return hashlib.sha256(example.prompt.encode("utf-8")).hexdigest()[:16]


def outcome_rows(task: Task, completions: Sequence[str], examples: Sequence[Example]) -> list[dict[str, Any]]:
  """The rows of an outcomes file (module docstring) for ``completions`` of ``examples``.

  The task's running ``num_bound_hits`` is left as it was: the evaluation's :meth:`Task.metrics`
  already counted these completions.
  """
  hits = task.num_bound_hits
  try:
    columns = task.example_outcomes(completions, examples)
  finally:
    task.num_bound_hits = hits
  return [{"index": i, "key": example_key(ex), **{k: float(v[i]) for k, v in columns.items()}}
          for i, ex in enumerate(examples)]


def write_outcomes(path: str | os.PathLike, task: Task, completions: Sequence[str],
                   examples: Sequence[Example]) -> pathlib.Path:
  """Grades ``completions`` per example and writes them to :func:`outcomes_path` of ``path``; returns
  that file."""
  out = outcomes_path(path)
  io_utils.atomic_write_text(out, "".join(json.dumps(r) + "\n" for r in outcome_rows(task, completions, examples)))
  return out


def read_outcomes(path: str | os.PathLike, metric: str) -> dict[str, float]:
  """One column of an outcomes file (gzip-compressed when its name ends in ``.gz``, as results files
  commit them): ``{example key: value}``.

  Raises:
    FileNotFoundError: no such file.
    DataError: a line that is not a JSON object with ``key`` and ``metric`` (the file, line and the
      columns there named), or a key twice.
  """
  path = storage.as_path(path)
  out: dict[str, float] = {}
  text = (gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()).decode("utf-8")
  for n, line in enumerate(text.splitlines(), 1):
    if not line.strip():
      continue
    try:
      row = json.loads(line)
    except json.JSONDecodeError:
      raise DataError(f"{path}: line {n} is not JSON; delete the file to regrade the evaluation") from None
    if not isinstance(row, dict) or "key" not in row or metric not in row:
      have = sorted(row) if isinstance(row, dict) else type(row).__name__
      raise DataError(f"{path}: line {n} has no 'key' or no {metric!r} (it has {have})")
    if row["key"] in out:
      raise DataError(f"{path}: line {n} repeats example key {row['key']!r}")
    out[row["key"]] = float(row[metric])
  return out


def outcomes_from_generations(task: Task, generations: str | os.PathLike,
                              examples: Sequence[Example]) -> pathlib.Path | None:
  """Writes the outcomes of a cached evaluation from its ``.generations.jsonl`` (no decoding), when
  that file holds one row per example with the examples' prompts; returns the outcomes file, or None
  (no such file, or it does not match)."""
  generations = storage.as_path(generations)
  if not generations.exists():
    return None
  try:
    rows = [json.loads(line) for line in generations.read_text(encoding="utf-8").splitlines() if line.strip()]
  except (json.JSONDecodeError, UnicodeDecodeError):
    return None
  if len(rows) != len(examples) or any(not isinstance(r, dict) or r.get("prompt") != ex.prompt
                                       or not isinstance(r.get("completion"), str) for r, ex in zip(rows, examples)):
    return None
  return write_outcomes(generations, task, [r["completion"] for r in rows], examples)


__all__ = ["SUFFIX", "example_key", "outcome_rows", "outcomes_from_generations", "outcomes_path", "read_outcomes",
           "write_outcomes"]
