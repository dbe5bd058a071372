"""TFDS builders for the benchmark files (:mod:`daca_jax.data.catalog`), written as ArrayRecord so that
``tfds.data_source`` reads them with random access and without TensorFlow.

Each catalogue dataset (``daca_gsm8k``, ``daca_math500``, ``daca_mbpp``, ``daca_sudoku4x4_d1``,
``daca_countdown_d1``, ``daca_jsonschemabench``) is built from the local files the library reads
(``data.data_dir``): the files are checked against their published SHA-256 first, and each split keeps
its file's order (shuffling is off). An example is ``{"index": int64, "record": text}``, the record as
JSON text: a file's JSON object as it is, ``{"puzzle", "solution"}`` for d1's Sudoku CSV, and
``{"file", "text"}`` for a schema file (text null if not UTF-8). :class:`daca_jax.data.sources.TFDSFiles`
reads them back to the records :class:`~daca_jax.data.sources.LocalFiles` parses.

Needs ``tensorflow_datasets`` and ``array_record`` (the ``[tfds]`` extra); TensorFlow is not needed to
build or to read.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import pathlib
import shutil
import tempfile
from typing import Any, Iterator

import numpy as np
from absl import logging as absl_logging
import tensorflow_datasets as tfds

from daca_jax import storage
from daca_jax.data import catalog, sources
from daca_jax.errors import DataError

FILE_FORMAT = "array_record"


def sha256(path: pathlib.Path) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def file_records(files: sources.LocalFiles, entry: catalog.BenchmarkFile) -> list[Any]:
  """The records of ``entry`` as the local source parses them, in a JSON-ready form (module docstring).

  Raises:
    DataError: the file is missing, or its SHA-256 is not the published one.
  """
  path = files.path(entry.rel)
  if not files.has(entry.rel):
    raise DataError(f"{path}: missing; the dataset {entry.dataset} is built from the local benchmark files "
                    f"(--data_dir / $DACA_DATA_DIR)")
  if entry.sha256:
    got = sha256(path)
    if got != entry.sha256:
      raise DataError(f"{path}: SHA-256 {got} is not the published {entry.sha256} (a changed or partial copy)")
  if entry.layout in ("jsonl", "json"):
    return files.json_records(entry.rel)
  if entry.layout == "sudoku_csv":
    return [{"puzzle": p, "solution": s} for p, s in files.sudoku_rows(entry.rel)]
  return [{"file": name, "text": text} for name, text in files.schema_texts(entry.rel)]


def record_texts(files: sources.LocalFiles, entry: catalog.BenchmarkFile) -> list[str]:
  """The JSON texts the split of ``entry`` stores, one per record of its file (:func:`file_records`)."""
  return [json.dumps(record, ensure_ascii=False) for record in file_records(files, entry)]


class CatalogBuilder(tfds.core.GeneratorBasedBuilder):
  """A catalogue dataset built from local files; subclasses name the dataset (``DATASET``)."""

  DATASET = ""
  # The folder the files are read from; set by :func:`build` before a build (TFDS constructs builders
  # with its own arguments only).
  local_files: sources.LocalFiles | None = None

  @classmethod
  def _dataset(cls) -> catalog.Dataset:
    return catalog.DATASETS[cls.DATASET]

  def _info(self) -> tfds.core.DatasetInfo:
    d = self._dataset()
    digests = ({} if self.local_files is None else  # reading a built dataset: its stored metadata is used
               {e.split: sources.records_digest(record_texts(self.local_files, e))
                for e in catalog.dataset_files(self.DATASET)})
    return tfds.core.DatasetInfo(
        builder=self,
        description=d.description + f" License: {d.license}.",
        features=tfds.features.FeaturesDict({"index": np.int64, "record": tfds.features.Text()}),
        homepage=d.homepage,
        metadata=tfds.core.MetadataDict(records_sha256=digests),  # what a read checks its records against
        disable_shuffling=True)  # a split keeps its file's order: the records equal the local source's

  def _split_generators(self, dl_manager: Any) -> dict[str, Iterator[tuple[int, dict[str, Any]]]]:
    if self.local_files is None:
      raise DataError(f"{self.DATASET}: build it with daca_jax.data.tfds_builders.build (it needs the local "
                      "benchmark folder)")
    return {entry.split: self._generate_examples(entry) for entry in catalog.dataset_files(self.DATASET)}

  def _generate_examples(self, entry: catalog.BenchmarkFile) -> Iterator[tuple[int, dict[str, Any]]]:
    texts = record_texts(self.local_files, entry)
    if len(texts) != entry.rows:
      raise DataError(f"{self.local_files.where(entry.rel)}: {len(texts)} records, expected {entry.rows}")
    for i, text in enumerate(texts):
      yield i, {"index": i, "record": text}


def _builder_class(name: str) -> type[CatalogBuilder]:
  cls_name = "".join(part.capitalize() for part in name.split("_"))
  version = tfds.core.Version(catalog.DATASETS[name].version)
  # TFDS registers a builder class under its snake-case name: DacaGsm8k -> daca_gsm8k.
  return type(cls_name, (CatalogBuilder,), {"DATASET": name, "VERSION": version, "__module__": __name__,
                                           "RELEASE_NOTES": {str(version): "From the published files."}})


BUILDERS: dict[str, type[CatalogBuilder]] = {name: _builder_class(name) for name in catalog.DATASETS}


def build(names: list[str] | tuple[str, ...], tfds_dir: str | pathlib.Path, data_dir: str = "",
          overwrite: bool = False, log: Any = print) -> dict[str, pathlib.Path]:
  """Builds the catalogue datasets ``names`` into ``tfds_dir`` from the local benchmark files.

  Args:
    names: dataset names (:data:`daca_jax.data.catalog.DATASETS`); empty: all.
    tfds_dir: the TFDS data directory to write (``data.tfds_dir`` of the runs that read it).
    data_dir: the local benchmark folder ("" = ``$DACA_DATA_DIR`` or the default beside the repository).
    overwrite: rebuild a dataset already there (else it is kept, checked by reading it back).
    log: where progress lines go.

  Returns:
    ``{name: the dataset's version folder}``.

  Raises:
    DataError: an unknown name, a missing or changed file, or a dataset that does not read back as its
      files' records. A failed build leaves no version folder (TFDS writes into an ``incomplete.*``
      folder and renames it when done).
  """
  names = list(names) or list(catalog.DATASETS)
  unknown = sorted(set(names) - set(catalog.DATASETS))
  if unknown:
    raise DataError(f"unknown benchmark datasets {unknown}; the known ones are {sorted(catalog.DATASETS)}")
  if storage.is_remote(tfds_dir):
    return _build_into_bucket(names, storage.absolute(tfds_dir), data_dir, overwrite, log)
  files = sources.open_benchmarks(data_dir)
  if files is None:
    raise DataError("no local benchmark folder: set --data_dir or $DACA_DATA_DIR (the default "
                    "../shared/data beside the repository does not exist)")
  tfds_dir = pathlib.Path(tfds_dir).expanduser().absolute()
  if tfds_dir.exists() and not tfds_dir.is_dir():
    raise DataError(f"--tfds_dir={str(tfds_dir)!r} is not a folder")
  tfds.disable_progress_bar()
  absl_logging.set_verbosity(absl_logging.WARNING)  # TFDS's per-shard INFO lines
  tfds_dir.mkdir(parents=True, exist_ok=True)
  out = {}
  for name in names:
    cls = BUILDERS[name]
    folder = tfds_dir / name / catalog.DATASETS[name].version
    if folder.exists() and not overwrite:
      check_built(tfds_dir, files, name)  # kept if it reads back as its files; else one line saying --overwrite
      log(f"{name}: already built in {folder}, and it reads back as its files")
      out[name] = folder
      continue
    if folder.exists():
      shutil.rmtree(folder)
    cls.local_files = files
    try:
      # nothing is downloaded (TFDS wants the folder); its "Downloading and preparing" prints are not ours
      with tempfile.TemporaryDirectory() as downloads, contextlib.redirect_stdout(io.StringIO()):
        cls(data_dir=str(tfds_dir), file_format=FILE_FORMAT).download_and_prepare(
            download_dir=downloads, download_config=tfds.download.DownloadConfig(try_download_gcs=False))
    finally:
      cls.local_files = None
    check_built(tfds_dir, files, name)
    log(f"{name}: {', '.join(f'{e.split} {e.rows}' for e in catalog.dataset_files(name))} -> {folder}")
    out[name] = folder
  return out


def _build_into_bucket(names: list[str], url: str, data_dir: str, overwrite: bool, log: Any) -> dict[str, Any]:
  """:func:`build` for a ``gs://`` ``tfds_dir``: array_record writes local files only, so each dataset is built
  (or, already in the bucket, copied and checked) in this host's local copy of the folder
  (:func:`daca_jax.data.sources.mirror_root`), then uploaded file by file with ``dataset_info.json`` last: a
  reader finds the dataset complete or not built, never a part of it (a rebuild deletes the old one first)."""
  staging = sources.mirror_root(url)
  for name in names:
    if not overwrite and storage.exists(f"{url}/{name}/{catalog.DATASETS[name].version}/dataset_info.json"):
      sources.mirror_dataset(url, staging, name)  # built already: checked below by reading it back
  built = build(names, staging, data_dir, overwrite=overwrite, log=lambda line: log(line.replace(str(staging), url)))
  out = {}
  for name, folder in built.items():
    target = f"{url}/{name}/{catalog.DATASETS[name].version}"
    if overwrite or not storage.exists(f"{target}/dataset_info.json"):
      storage.rmtree(target)
      files = sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.name == "dataset_info.json")
      for path in files:
        storage.write_bytes(f"{target}/{path.relative_to(folder).as_posix()}", path.read_bytes())
      log(f"{name}: uploaded to {target}")
    out[name] = storage.as_path(target)
  return out


def check_built(tfds_dir: pathlib.Path, files: sources.LocalFiles, name: str) -> None:
  """Reads dataset ``name`` back from ``tfds_dir`` and checks each split equals its local file's records.

  Raises:
    DataError: a split that differs (names the split and the first differing index).
  """
  for entry in catalog.dataset_files(name):
    want = record_texts(files, entry)
    try:
      got = sources.read_split(tfds_dir, entry)
    except DataError as e:
      raise DataError(f"{e} (python experiments/build_tfds.py --overwrite rebuilds it)") from None
    if got != want:
      first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
      raise DataError(f"{name} split {entry.split!r} in {tfds_dir} differs from {files.where(entry.rel)} at "
                      f"record {first} (rebuild it with --overwrite)")
