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

import hashlib
import json
import os
import pathlib
from typing import Any, Protocol

from daca_jax import storage
from daca_jax.data import catalog, local
from daca_jax.errors import DataError

# Where the datasets of a gs:// data.tfds_dir are copied on each host (``$DACA_TFDS_CACHE``, else the user's
# cache folder), one folder per bucket path.
CACHE_ENV = "DACA_TFDS_CACHE"

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
    if rel in _FILES:  # a catalogue entry: the file, or the folder of files, it names
      return path.is_dir() if _FILES[rel] == "schema_dir" else path.is_file()
    return path.is_file() or path.is_dir()  # e.g. another JSONSchemaBench subset

  def where(self, rel: str) -> str:
    return str(self.root / rel)

  def json_records(self, rel: str) -> list[dict]:
    return local.read_json_records(self.root / rel)

  def sudoku_rows(self, rel: str) -> list[tuple[str, str]]:
    return local.read_sudoku_csv(self.root / rel)

  def schema_texts(self, rel: str) -> list[tuple[str, str | None]]:
    return local.read_text_folder(self.root / rel, "*.json")


_FILES = {f.rel: f.layout for f in catalog.FILES}


class TFDSFiles:
  """The benchmark files as the TFDS datasets :mod:`daca_jax.data.tfds_builders` built under ``data_dir``.

  Each catalogue file is one split (:data:`daca_jax.data.catalog.FILES`); an example is the file's record
  as JSON text with its index, so the records equal :class:`LocalFiles`' ones. Reading needs
  ``tensorflow_datasets`` and ``array_record`` (the ``[tfds]`` extra), not TensorFlow.

  A split is read whole, checked against the digest of its records that the build stored, and each record
  checked as the local reader checks its file's rows. A task asking for a catalogue file whose dataset is
  not built here is an error, never a silent fallback: the run chose this source.

  Args:
    data_dir: the TFDS data directory (``data.tfds_dir``) the datasets were built into.

  Raises:
    DataError: ``data_dir`` is empty or not a folder, or tensorflow_datasets is not installed.
  """

  field = "data.tfds_dir"

  def __init__(self, data_dir: str | os.PathLike[str]):
    if not str(data_dir):
      raise DataError("data.source='tfds' needs data.tfds_dir: the folder the TFDS datasets were built "
                      "into (python experiments/build_tfds.py --tfds_dir=...)")
    self.remote = storage.absolute(data_dir) if storage.is_remote(data_dir) else None
    if self.remote is not None:  # array_record opens local files only: each dataset is read from a local copy
      if not storage.is_dir(self.remote):
        raise DataError(f"data.tfds_dir={self.remote!r} holds no datasets (build them with python "
                        f"experiments/build_tfds.py --tfds_dir={self.remote})")
      data_dir = mirror_root(self.remote)
      data_dir.mkdir(parents=True, exist_ok=True)
    self.data_dir = pathlib.Path(data_dir).expanduser().absolute()
    if not self.data_dir.is_dir():
      raise DataError(f"data.tfds_dir={str(data_dir)!r}: {str(self.data_dir)!r} is not a folder (build the "
                      f"datasets into it with python experiments/build_tfds.py --tfds_dir={data_dir})")
    require_tfds()
    self._texts: dict[str, list[str]] = {}
    self._builders: dict[str, Any] = {}

  @property
  def shown(self) -> str:
    """The folder as the user gave it: the ``gs://`` URL, not this host's copy of it."""
    return self.remote or str(self.data_dir)

  def __repr__(self) -> str:
    return f"TFDSFiles({self.shown!r})"

  def has(self, rel: str) -> bool:
    """Whether ``rel`` is a catalogue file (its dataset must then be built here).

    Raises:
      DataError: ``rel``'s dataset is not built here, or is another version or another dataset.
    """
    try:
      entry = catalog.benchmark_file(rel)
    except DataError:
      return False
    self._builder(entry)
    return True

  def _builder(self, entry: catalog.BenchmarkFile) -> Any:
    """The checked builder of ``entry``'s dataset, read once per dataset (:func:`check_dataset`)."""
    if entry.dataset not in self._builders:
      if self.remote is not None:
        mirror_dataset(self.remote, self.data_dir, entry.dataset)
      self._builders[entry.dataset] = check_dataset(self.data_dir, entry, shown=self.shown)
    builder = self._builders[entry.dataset]
    if entry.split not in builder.info.splits:
      check_dataset(self.data_dir, entry, shown=self.shown)  # raises: the split is missing
    return builder

  def where(self, rel: str) -> str:
    try:
      entry = catalog.benchmark_file(rel)
    except DataError:
      under = sorted({f.dataset for f in catalog.FILES if f.rel.startswith(rel.rstrip("/") + "/")})
      return (f"TFDS {', '.join(under)} in {self.shown}" if under
              else f"{rel} (no TFDS dataset of this library holds it) in {self.shown}")
    return f"TFDS {entry.dataset}:{catalog.DATASETS[entry.dataset].version} split {entry.split!r} in {self.shown}"

  def _records(self, rel: str, layout: tuple[str, ...]) -> list[tuple[str, Any]]:
    """``(where, record)`` of each record of ``rel``'s split, parsed afresh (callers may keep them)."""
    entry = catalog.benchmark_file(rel)
    if entry.layout not in layout:
      raise DataError(f"{rel} is a {entry.layout} file, not one of {list(layout)}")
    if rel not in self._texts:
      self._texts[rel] = read_split(self.data_dir, entry, self._builder(entry), shown=self.shown)
    out, here = [], self.where(rel)
    for i, text in enumerate(self._texts[rel]):
      where = f"{here}: record {i}"
      try:
        out.append((where, json.loads(text)))
      except ValueError as e:
        raise DataError(f"{where}: not JSON ({e})") from None
    return out

  def json_records(self, rel: str) -> list[dict]:
    records = self._records(rel, ("jsonl", "json"))
    for where, record in records:
      _check_type(record, dict, where, "a JSON object")
    return [r for _, r in records]

  def sudoku_rows(self, rel: str) -> list[tuple[str, str]]:
    rows = []
    for where, record in self._records(rel, ("sudoku_csv",)):
      _check_type(record, dict, where, 'a JSON object {"puzzle", "solution"}')
      rows.append(local.check_sudoku_row(record.get("puzzle"), record.get("solution"), where))
    return rows

  def schema_texts(self, rel: str) -> list[tuple[str, str | None]]:
    out = []
    for where, record in self._records(rel, ("schema_dir",)):
      _check_type(record, dict, where, 'a JSON object {"file", "text"}')
      name, text = record.get("file"), record.get("text")
      if not isinstance(name, str) or not (text is None or isinstance(text, str)):
        raise DataError(f"{where}: expected a file name and its text (or null), got {record!r:.120}")
      out.append((name, text))
    return out


def mirror_root(url: str) -> pathlib.Path:
  """The local folder that holds this host's copy of the datasets under ``gs://`` folder ``url``."""
  cache = os.environ.get(CACHE_ENV) or os.path.join("~", ".cache", "daca_jax", "tfds")
  # Expanded here, before anything is made: a literal '~' folder in the current directory invites `rm -rf ~`.
  return pathlib.Path(cache).expanduser().absolute() / url[len(storage.REMOTE_PREFIX):].strip("/")


def mirror_dataset(url: str, root: pathlib.Path, dataset: str) -> None:
  """Copies the objects of ``url/<dataset>/`` to ``root/<dataset>/`` where the local copy is missing or
  differs (size, or MD5 where GCS gives one), each file written atomically; a read then checks the records
  against the digest the build stored (:func:`read_split`), as for a local folder.

  Raises:
    DataError: the bucket cannot be read (names the folder and the reason).
  """
  import base64

  folder = storage.join(url, dataset)
  try:
    for rel, (size, md5) in sorted(storage.list_files(folder).items()):
      parts = rel.split("/")
      if any(p in ("", ".", "..") for p in parts):  # an object name that would land outside this host's copy
        raise DataError(f"data.tfds_dir={url!r}: {dataset} holds an object named {rel!r}, which is no file of a "
                        "dataset build (rebuild it with build_tfds.py --overwrite)")
      local_path = root / dataset / rel
      if local_path.is_file() and local_path.stat().st_size == size and (
          md5 is None or base64.b64encode(hashlib.md5(local_path.read_bytes()).digest()).decode() == md5):
        continue
      local_path.parent.mkdir(parents=True, exist_ok=True)
      storage.write_bytes(local_path, storage.read_bytes(storage.join(folder, rel)))
  except OSError as e:
    raise DataError(f"data.tfds_dir={url!r}: {dataset} cannot be copied from the bucket to {root} "
                    f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})") from None


def _check_type(record: Any, kind: type, where: str, what: str) -> None:
  if not isinstance(record, kind):
    raise DataError(f"{where}: expected {what}, got {type(record).__name__}")


def require_tfds() -> Any:
  try:
    import tensorflow_datasets as tfds
  except ImportError as e:
    raise DataError(f"data.source='tfds' needs tensorflow_datasets and array_record: pip install -e "
                    f"'.[tfds]' ({e})") from None
  return tfds


def records_digest(texts: list[str]) -> str:
  """The SHA-256 of a split's records (their JSON texts, in order), which the build stores and a read checks."""
  digest = hashlib.sha256()
  for text in texts:
    digest.update(text.encode("utf-8"))
    digest.update(b"\n")
  return digest.hexdigest()


def _what(data_dir: pathlib.Path | str, entry: catalog.BenchmarkFile) -> str:
  return f"TFDS dataset {entry.dataset}:{catalog.DATASETS[entry.dataset].version} split {entry.split!r} in {data_dir}"


def check_dataset(data_dir: pathlib.Path, entry: catalog.BenchmarkFile, *, shown: str | None = None) -> Any:
  """The TFDS builder of ``entry``'s dataset under ``data_dir``, once it is known to be that dataset, at the
  version this library reads, with ``entry``'s split. ``shown`` names the folder in messages and in the build
  command they suggest, where it is not ``data_dir`` (a ``gs://`` folder that ``data_dir`` is this host's copy
  of: a dataset built into the copy would never reach the bucket).

  Raises:
    DataError: not built there (names the versions that are), unreadable, or another dataset, version
      or split layout; each message names the dataset, the split and the folder.
  """
  tfds = require_tfds()
  dataset = catalog.DATASETS[entry.dataset]
  folder = data_dir / entry.dataset / dataset.version
  what = _what(shown or data_dir, entry)
  build = (f"python experiments/build_tfds.py --tfds_dir={shown or data_dir} --datasets={entry.dataset}")
  try:
    built = folder.is_dir() and (folder / "dataset_info.json").is_file()
    others = sorted(p.name for p in (data_dir / entry.dataset).iterdir() if p.is_dir()) \
        if (data_dir / entry.dataset).is_dir() else []
  except OSError as e:
    raise DataError(f"{what}: cannot be read ({e.strerror or e}: {e.filename or folder})") from None
  if not built:
    found = f"versions there: {others}" if others else "not built there"
    raise DataError(f"{what}: {found} (build it: {build})")
  try:
    builder = tfds.builder_from_directory(str(folder))
    name, version, splits = builder.info.name, str(builder.info.version), set(builder.info.splits)
  except Exception as e:  # a damaged dataset_info.json / features.json
    raise DataError(f"{what}: cannot be read ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}; "
                    f"rebuild it: {build} --overwrite)") from None
  if name != entry.dataset or version != dataset.version:
    raise DataError(f"{what}: the folder holds {name}:{version} (rebuild it: {build} --overwrite)")
  if entry.split not in splits:
    raise DataError(f"{what}: the dataset has no such split (it has {sorted(splits)}; rebuild it: {build} --overwrite)")
  return builder


def read_split(data_dir: pathlib.Path, entry: catalog.BenchmarkFile, builder: Any = None, *,
               shown: str | None = None) -> list[str]:
  """The records of ``entry``'s split as JSON texts, in the file's order, read through
  ``tfds.data_source`` from the dataset built under ``data_dir`` (``builder``: its builder, already
  checked by :func:`check_dataset`; None checks it here).

  Raises:
    DataError: see :func:`check_dataset`; also a split that cannot be read, whose record count is not
      the file's, or whose records are not the ones the build wrote (their digest differs).
  """
  builder = check_dataset(data_dir, entry, shown=shown) if builder is None else builder
  what = _what(shown or data_dir, entry)
  try:
    source = builder.as_data_source(split=entry.split)
    texts = [_text(source[i]["record"]) for i in range(len(source))]
  except Exception as e:  # tfds / array_record errors on a partly written or foreign folder
    raise DataError(f"{what}: cannot be read ({type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''})") from None
  if len(texts) != entry.rows:
    raise DataError(f"{what}: {len(texts)} records, but the file has {entry.rows} (an incomplete build? "
                    f"rebuild it with --overwrite)")
  stored = (builder.info.metadata or {}).get("records_sha256", {}).get(entry.split)
  if stored != records_digest(texts):
    raise DataError(f"{what}: its records are not the ones the build wrote (their SHA-256 differs from the one "
                    f"stored with the dataset{'' if stored else ', which is missing'}); rebuild it with --overwrite")
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
  raise DataError(f"data.source={source!r}: expected 'local' or 'tfds'")
