"""Where the tasks' benchmark records come from: the files on the local disk, or the TFDS datasets built
from them (:mod:`daca_jax.data.tfds_builders`). Both give the same records in the same order.

A task names a benchmark file by its path under the data directory (``gsm8k/test.jsonl``, the
:mod:`daca_jax.data.catalog` entry) and asks its source for the records:

* :class:`LocalFiles` parses the file (:mod:`daca_jax.data.local`), as every run did before TFDS;
* :class:`TFDSFiles` reads the file's TFDS split from a ``data_dir`` through ``tfds.data_source``
  (ArrayRecord, random access; no TensorFlow needed), each example one record of the file.

``data.source`` (``local`` | ``tfds``) and ``data.tfds_dir`` choose one (:func:`from_config`).
"""
from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Protocol

from daca_jax.data import catalog, local
from daca_jax.errors import DataError

SOURCES = ("local", "tfds")  # data.source


class BenchmarkSource(Protocol):
  """What a task reads its benchmark files through."""

  field: str  # the config field that chose it, for messages ("data.data_dir")

  def has(self, rel: str) -> bool:
    """Whether benchmark file ``rel`` (a path under the data directory) is there."""

  def where(self, rel: str) -> str:
    """Where ``rel`` is read from, for messages and evaluation sources (a path, or a TFDS split)."""

  def json_records(self, rel: str) -> list[dict]:
    """The JSON objects of a ``jsonl`` / ``json`` file, in file order."""

  def sudoku_rows(self, rel: str) -> list[tuple[str, str]]:
    """The ``(puzzle, solution)`` rows of a d1 Sudoku CSV, in file order."""

  def schema_texts(self, rel: str) -> list[tuple[str, str | None]]:
    """``(file name, text)`` of each ``*.json`` of a schema folder, sorted by name (text None: not UTF-8)."""


class LocalFiles:
  """The benchmark files under a local folder (``data.data_dir``).

  Args:
    root: the data directory (already resolved, :func:`daca_jax.data.local.resolve_data_dir`).
  """

  field = "data.data_dir"

  def __init__(self, root: pathlib.Path):
    self.root = pathlib.Path(root)

  def __repr__(self) -> str:
    return f"LocalFiles({str(self.root)!r})"

  def path(self, rel: str) -> pathlib.Path:
    return self.root / rel

  def has(self, rel: str) -> bool:
    path = self.root / rel
    return path.is_dir() if rel in _FOLDERS else path.is_file()

  def where(self, rel: str) -> str:
    return str(self.root / rel)

  def json_records(self, rel: str) -> list[dict]:
    return local.read_json_records(self.root / rel)

  def sudoku_rows(self, rel: str) -> list[tuple[str, str]]:
    return local.read_sudoku_csv(self.root / rel)

  def schema_texts(self, rel: str) -> list[tuple[str, str | None]]:
    return local.read_text_folder(self.root / rel, "*.json")


_FOLDERS = frozenset(f.rel for f in catalog.FILES if f.layout == "schema_dir")


class TFDSFiles:
  """The benchmark files as the TFDS datasets :mod:`daca_jax.data.tfds_builders` built under ``data_dir``.

  Each catalogue file is one split (:data:`daca_jax.data.catalog.FILES`); an example is the file's record
  as JSON text with its index, so the records equal :class:`LocalFiles`' ones. Reading needs
  ``tensorflow_datasets`` and ``array_record`` (the ``[tfds]`` extra), not TensorFlow.

  Args:
    data_dir: the TFDS data directory (``data.tfds_dir``) the datasets were built into.

  Raises:
    DataError: ``data_dir`` is not a folder, or tensorflow_datasets is not installed.
  """

  field = "data.tfds_dir"

  def __init__(self, data_dir: str | os.PathLike[str]):
    self.data_dir = pathlib.Path(data_dir).expanduser()
    if not str(data_dir):
      raise DataError("data.source='tfds' needs data.tfds_dir: the folder the TFDS datasets were built "
                      "into (python experiments/build_tfds.py --tfds_dir=...)")
    if not self.data_dir.is_dir():
      raise DataError(f"data.tfds_dir={str(data_dir)!r}: {str(self.data_dir)!r} is not a folder (build the "
                      f"datasets into it with python experiments/build_tfds.py --tfds_dir={data_dir})")
    require_tfds()
    self._cache: dict[str, list[Any]] = {}

  def __repr__(self) -> str:
    return f"TFDSFiles({str(self.data_dir)!r})"

  def _folder(self, entry: catalog.BenchmarkFile) -> pathlib.Path:
    return self.data_dir / entry.dataset / catalog.DATASETS[entry.dataset].version

  def has(self, rel: str) -> bool:
    try:
      entry = catalog.benchmark_file(rel)
    except DataError:
      return False
    return (self._folder(entry) / "dataset_info.json").is_file()

  def where(self, rel: str) -> str:
    try:
      entry = catalog.benchmark_file(rel)
    except DataError:
      under = sorted({f.dataset for f in catalog.FILES if f.rel.startswith(rel.rstrip("/") + "/")})
      return (f"TFDS {', '.join(under)} in {self.data_dir}" if under
              else f"{rel} (no TFDS dataset of this library holds it) in {self.data_dir}")
    return f"TFDS {entry.dataset}:{catalog.DATASETS[entry.dataset].version} split {entry.split!r} in {self.data_dir}"

  def _records(self, rel: str, layout: tuple[str, ...]) -> list[Any]:
    if rel not in self._cache:
      entry = catalog.benchmark_file(rel)
      if entry.layout not in layout:
        raise DataError(f"{rel} is a {entry.layout} file, not one of {list(layout)}")
      self._cache[rel] = [json.loads(text) for text in read_split(self.data_dir, entry)]
    return self._cache[rel]

  def json_records(self, rel: str) -> list[dict]:
    return list(self._records(rel, ("jsonl", "json")))

  def sudoku_rows(self, rel: str) -> list[tuple[str, str]]:
    return [(r["puzzle"], r["solution"]) for r in self._records(rel, ("sudoku_csv",))]

  def schema_texts(self, rel: str) -> list[tuple[str, str | None]]:
    return [(r["file"], r["text"]) for r in self._records(rel, ("schema_dir",))]


def require_tfds() -> Any:
  try:
    import tensorflow_datasets as tfds
  except ImportError as e:
    raise DataError(f"data.source='tfds' needs tensorflow_datasets and array_record: pip install -e "
                    f"'.[tfds]' ({e})") from None
  return tfds


def read_split(data_dir: pathlib.Path, entry: catalog.BenchmarkFile) -> list[str]:
  """The records of ``entry``'s split as JSON texts, in the file's order, read through
  ``tfds.data_source`` from the dataset built under ``data_dir``.

  Raises:
    DataError: the dataset or split is not built there, was built by another version, or is
      incomplete (its example count differs from the split's); each message names the dataset, the
      split and the folder.
  """
  tfds = require_tfds()
  dataset = catalog.DATASETS[entry.dataset]
  folder = data_dir / entry.dataset / dataset.version
  what = f"TFDS dataset {entry.dataset}:{dataset.version} split {entry.split!r} in {data_dir}"
  if not (folder / "dataset_info.json").is_file():
    built = sorted(p.name for p in (data_dir / entry.dataset).glob("*") if p.is_dir()) \
        if (data_dir / entry.dataset).is_dir() else []
    found = f"versions there: {built}" if built else "not built there"
    raise DataError(f"{what}: {found} (build it: python experiments/build_tfds.py --tfds_dir={data_dir} "
                    f"--datasets={entry.dataset})")
  try:
    builder = tfds.builder_from_directory(str(folder))
    if entry.split not in builder.info.splits:
      raise DataError(f"{what}: the dataset has no such split (it has {sorted(builder.info.splits)})")
    source = builder.as_data_source(split=entry.split)
    texts = [_text(source[i]["record"]) for i in range(len(source))]
  except DataError:
    raise
  except Exception as e:  # tfds / array_record errors on a partly written or foreign folder
    raise DataError(f"{what}: cannot be read ({type(e).__name__}: {str(e).splitlines()[0][:300]})") from None
  if len(texts) != entry.rows:
    raise DataError(f"{what}: {len(texts)} records, but the file has {entry.rows} (an incomplete build? "
                    f"rebuild it with --overwrite)")
  return texts


def _text(value: Any) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def open_benchmarks(data_dir: str | os.PathLike[str] | BenchmarkSource | None) -> BenchmarkSource | None:
  """The source a task reads from: ``data_dir`` itself when it is a source already; otherwise the local
  folder it names (``""``: the default folder when it exists, :func:`daca_jax.data.local.resolve_data_dir`);
  None for None (no benchmark files) or an absent default.

  Raises:
    FileNotFoundError: a named folder that does not exist (names ``data.data_dir``).
  """
  if data_dir is None or isinstance(data_dir, (LocalFiles, TFDSFiles)):
    return data_dir
  root = local.resolve_data_dir(str(data_dir))
  return None if root is None else LocalFiles(root)


def from_config(source: str, data_dir: str, tfds_dir: str) -> str | TFDSFiles:
  """What the job hands its tasks as ``data_dir`` for ``data.source`` / ``data.data_dir`` / ``data.tfds_dir``:
  the folder's name for ``local`` (the tasks resolve it, :func:`open_benchmarks`), a :class:`TFDSFiles`
  for ``tfds``.

  Raises:
    DataError: an unknown source, or ``tfds`` without a readable ``tfds_dir``.
  """
  if source == "local":
    return data_dir
  if source == "tfds":
    return TFDSFiles(tfds_dir)
  raise DataError(f"data.source={source!r}: expected one of {list(SOURCES)}")
