"""JSONSchemaBench (guidance-ai/jsonschemabench, ``data/<subset>/*.json``): reading and compiling its
schemas, and the stable train / evaluation split of their file names.

Every schema is compiled by :func:`daca_jax.tasks.json_schema.validation.compile_schema` (the
meta-schema check, the supported-keyword check, linear-time regexes); the files that do not compile
are reported by reason, not dropped silently.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import pathlib
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from daca_jax.data import local, sources
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


_CACHE: collections.OrderedDict[tuple[str, tuple[str, ...]], tuple[tuple[BenchSchema, ...], LoadReport]] = \
    collections.OrderedDict()


class _SubsetReader(NamedTuple):
  """How the subsets are read: a cache key, and whether a subset is there, where, and its files' texts."""

  key: str
  has: Callable[[str], bool]
  where: Callable[[str], str]
  texts: Callable[[str], list[tuple[str, str | None]]]


def _load(files: _SubsetReader, subsets: tuple[str, ...]) -> tuple[tuple[BenchSchema, ...], LoadReport]:
  out: list[BenchSchema] = []
  skipped: dict[str, list[tuple[str, str]]] = {}
  num_files = 0
  for subset in subsets:
    if not files.has(subset):
      raise DataError(f"{files.where(subset)}: JSONSchemaBench subset folder does not exist "
                      f"(task.options.subsets={list(subsets)!r}; known: {list(BENCH_SUBSETS)})")
    for name, text in files.texts(subset):
      num_files += 1
      key = f"{subset}/{name}"
      try:
        try:
          if text is None:
            raise ValueError("not UTF-8 text")
          schema = json.loads(text)
        except ValueError as e:
          raise SchemaCompileError("not_json", str(e)[:200]) from None
        out.append(BenchSchema(subset, name, compile_schema(schema)))
      except SchemaCompileError as e:
        skipped.setdefault(e.reason, []).append((key, e.detail))
  report = LoadReport(num_files=num_files, num_compiled=len(out),
                      skipped={k: tuple(v) for k, v in skipped.items()})
  return tuple(out), report


def load_jsonschemabench(root: str | os.PathLike[str] | sources.BenchmarkSource,
                         subsets: Sequence[str] = BENCH_SUBSETS) -> tuple[list[BenchSchema], LoadReport]:
  """Reads and compiles every ``<subset>/*.json`` schema (sorted by file name) of JSONSchemaBench.

  Args:
    root: the ``jsonschemabench`` folder (guidance-ai/jsonschemabench ``data/`` layout), or a source of
      the benchmark files (:mod:`daca_jax.data.sources`) whose ``jsonschemabench/<subset>`` it reads.
    subsets: subset folder names.

  Returns:
    ``(schemas that compiled, report)``; cached per ``(root, subsets)``.

  Raises:
    DataError: a subset folder does not exist.
  """
  if isinstance(root, (str, os.PathLike)):  # the folder itself: its subsets are its sub-folders
    folder = pathlib.Path(root).resolve()
    reader = _SubsetReader(str(folder), lambda s: (folder / s).is_dir(), lambda s: str(folder / s),
                           lambda s: local.read_text_folder(folder / s, "*.json"))
  else:
    rel = lambda s: f"{BENCH_DIR}/{s}"
    reader = _SubsetReader(repr(root), lambda s: root.has(rel(s)), lambda s: root.where(rel(s)),
                           lambda s: root.schema_texts(rel(s)))
  key = (reader.key, tuple(subsets))
  if key not in _CACHE:
    if len(_CACHE) >= 4:
      _CACHE.popitem(last=False)  # the least recently used
    _CACHE[key] = _load(reader, tuple(subsets))
  _CACHE.move_to_end(key)
  schemas, report = _CACHE[key]
  return list(schemas), report


def in_eval_split(key: str, eval_fraction: float) -> bool:
  """Stable split: the first 8 hex digits of sha1(key) as a fraction of 2**32."""
  return int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) < eval_fraction * 2**32


__all__ = ["BENCH_DIR", "BENCH_SUBSETS", "BenchSchema", "LoadReport", "compact", "in_eval_split",
           "load_jsonschemabench"]
