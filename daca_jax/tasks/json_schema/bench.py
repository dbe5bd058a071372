"""JSONSchemaBench (guidance-ai/jsonschemabench, ``data/<subset>/*.json``): reading and compiling its
schemas, and the stable train / evaluation split of their file names.

Every schema is compiled by :func:`daca_jax.tasks.json_schema.validation.compile_schema` (the
meta-schema check, the supported-keyword check, linear-time regexes); the files that do not compile
are reported by reason, not dropped silently.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pathlib
from typing import Any, Mapping, Sequence

from daca_jax.errors import DataError
from daca_jax.tasks.json_schema.validation import CompiledSchema, SchemaCompileError, compile_schema

BENCH_DIR = "jsonschemabench"  # relative to the data dir (see ../shared/data/SOURCES.md)
BENCH_SUBSETS = ("Github_easy", "Glaiveai2K")


def compact(value: Any) -> str:
  """Compact JSON text (no spaces), the prompt/target encoding of this task."""
  return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclasses.dataclass(frozen=True)
class BenchSchema:
  """One JSONSchemaBench schema that compiled: ``subset`` folder, file ``name``, the schema."""

  subset: str
  name: str
  compiled: CompiledSchema

  @property
  def key(self) -> str:
    return f"{self.subset}/{self.name}"


@dataclasses.dataclass(frozen=True)
class LoadReport:
  """What :func:`load_jsonschemabench` found.

  Attributes:
    num_files: schema files read.
    num_compiled: schemas that compiled (the length of the returned list).
    skipped: ``{reason: [(subset/file, detail), ...]}`` for the files that did not.
  """

  num_files: int
  num_compiled: int
  skipped: Mapping[str, tuple[tuple[str, str], ...]]

  def summary(self) -> str:
    parts = ", ".join(f"{r}: {len(v)}" for r, v in sorted(self.skipped.items()))
    return (f"{self.num_compiled} of {self.num_files} schemas compile"
            + (f"; skipped {self.num_files - self.num_compiled} ({parts})" if parts else ""))


@functools.lru_cache(maxsize=4)
def _load_cached(root: str, subsets: tuple[str, ...]) -> tuple[tuple[BenchSchema, ...], LoadReport]:
  out: list[BenchSchema] = []
  skipped: dict[str, list[tuple[str, str]]] = {}
  num_files = 0
  for subset in subsets:
    folder = pathlib.Path(root) / subset
    if not folder.is_dir():
      raise DataError(f"{folder}: JSONSchemaBench subset folder does not exist "
                      f"(task.options.subsets={list(subsets)!r}; known: {list(BENCH_SUBSETS)})")
    for path in sorted(folder.glob("*.json")):
      num_files += 1
      key = f"{subset}/{path.name}"
      try:
        try:
          schema = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
          raise SchemaCompileError("not_json", str(e)[:200]) from None
        out.append(BenchSchema(subset, path.name, compile_schema(schema)))
      except SchemaCompileError as e:
        skipped.setdefault(e.reason, []).append((key, e.detail))
  report = LoadReport(num_files=num_files, num_compiled=len(out),
                      skipped={k: tuple(v) for k, v in skipped.items()})
  return tuple(out), report


def load_jsonschemabench(root: str | os.PathLike[str],
                         subsets: Sequence[str] = BENCH_SUBSETS) -> tuple[list[BenchSchema], LoadReport]:
  """Reads and compiles every ``<root>/<subset>/*.json`` schema (sorted by file name).

  Args:
    root: the ``jsonschemabench`` folder (guidance-ai/jsonschemabench ``data/`` layout).
    subsets: subset folder names.

  Returns:
    ``(schemas that compiled, report)``; cached per ``(root, subsets)``.

  Raises:
    DataError: a subset folder does not exist.
  """
  schemas, report = _load_cached(str(pathlib.Path(root).resolve()), tuple(subsets))
  return list(schemas), report


def in_eval_split(key: str, eval_fraction: float) -> bool:
  """Stable split: the first 8 hex digits of sha1(key) as a fraction of 2**32."""
  return int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) < eval_fraction * 2**32


__all__ = ["BENCH_DIR", "BENCH_SUBSETS", "BenchSchema", "LoadReport", "compact", "in_eval_split",
           "load_jsonschemabench"]
