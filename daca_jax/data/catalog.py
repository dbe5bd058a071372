"""The benchmark files the tasks read, as one table: where each lies under the data directory, how it is
parsed, its checksum, and the TFDS dataset and split it becomes (:mod:`daca_jax.data.tfds_builders`).

The facts (rows, commits, licenses, SHA-256) are those of the files' public repositories as the shared
data folder's ``SOURCES.md`` records them. Standard library only.
"""
from __future__ import annotations

import dataclasses

from daca_jax.errors import DataError

# How a file is parsed (daca_jax.data.local): one JSON object per line, a JSON array of objects, d1's
# ``Puzzle,Solution`` CSV, or a folder of JSON Schema files (one schema per file, read as text).
LAYOUTS = ("jsonl", "json", "sudoku_csv", "schema_dir")


@dataclasses.dataclass(frozen=True)
class Dataset:
  """A benchmark as a TFDS dataset.

  Attributes:
    name: the TFDS name (``daca_gsm8k``); its builder is :mod:`daca_jax.data.tfds_builders`'.
    description: what it is and where it comes from (repository and commit).
    homepage: the source repository.
    license: the source's license.
    version: the dataset version the builders write and the readers require.
  """

  name: str
  description: str
  homepage: str
  license: str
  version: str = "1.0.0"


@dataclasses.dataclass(frozen=True)
class BenchmarkFile:
  """One benchmark file (or folder) under the data directory, and the TFDS split it becomes.

  Attributes:
    rel: its path under the data directory (``gsm8k/test.jsonl``), as the tasks name it.
    dataset: the TFDS dataset (:data:`DATASETS`) it is a split of.
    split: the split's name.
    layout: how it is parsed (:data:`LAYOUTS`).
    rows: its number of records (files, for a folder).
    sha256: the file's SHA-256 as published ("" for a folder: its files are checked one by one by
      the reader that parses them).
  """

  rel: str
  dataset: str
  split: str
  layout: str
  rows: int
  sha256: str = ""


DATASETS: dict[str, Dataset] = {d.name: d for d in (
    Dataset("daca_gsm8k", "GSM8K grade-school math word problems (openai/grade-school-math @ 3101c7d5, "
            "grade_school_math/data/); each answer ends with '#### <number>'.",
            "https://github.com/openai/grade-school-math", "MIT"),
    Dataset("daca_math500", "MATH500 test problems and the MATH training set as ant-research/Drift @ "
            "7abd99b7 ships them (data/MATH500.json, data/MATH_train.json).",
            "https://github.com/ant-research/Drift", "Apache-2.0 (MATH: MIT)"),
    Dataset("daca_mbpp", "MBPP as reformatted by ant-research/Drift @ 7abd99b7 (data/MBPP*.json: "
            "question, test_list, ...).", "https://github.com/ant-research/Drift",
            "Apache-2.0 (MBPP: CC-BY-4.0)"),
    Dataset("daca_sudoku4x4_d1", "d1's 4x4 Sudoku test puzzles (dllm-reasoning/d1 @ 837888f2, "
            "dataset/4x4_test_sudoku.csv; Puzzle,Solution, 0 = blank; every puzzle has 8 blanks).",
            "https://github.com/dllm-reasoning/d1", "Apache-2.0"),
    Dataset("daca_countdown_d1", "d1's Countdown test items with three numbers (dllm-reasoning/d1 @ "
            "837888f2, dataset/countdown_cd3_test.jsonl; input 'a,b,c', output the target).",
            "https://github.com/dllm-reasoning/d1", "Apache-2.0"),
    Dataset("daca_jsonschemabench", "JSONSchemaBench's Github_easy and Glaiveai2K subsets "
            "(guidance-ai/jsonschemabench @ ba103c73, data/; one JSON Schema per file, kept as text).",
            "https://github.com/guidance-ai/jsonschemabench", "as published by its authors"),
)}

FILES: tuple[BenchmarkFile, ...] = (
    BenchmarkFile("gsm8k/test.jsonl", "daca_gsm8k", "test", "jsonl", 1319,
                  "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"),
    BenchmarkFile("gsm8k/train.jsonl", "daca_gsm8k", "train", "jsonl", 7473,
                  "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465"),
    BenchmarkFile("math500/test.json", "daca_math500", "test", "json", 500,
                  "ca87d63fab75d106facbff0a4c3d5a79b1da0b5770dde12e2e54a8833898b29e"),
    BenchmarkFile("math500/math_train.json", "daca_math500", "train", "json", 8523,
                  "539028c708d30c18805c92329f0b7d4cedb29f99b25cfe7742772f57c6e8a961"),
    BenchmarkFile("mbpp/test.json", "daca_mbpp", "test", "json", 498,
                  "b8d801362c4ad36d8de07d0416bee952a5fee96bfb57b6177e4d5b0f447b5b43"),
    BenchmarkFile("mbpp/train.json", "daca_mbpp", "train", "json", 472,
                  "416317dee3ec2ca5274c8d3122c50ba7d401bb19c9e7047911484fc537af7fe8"),
    BenchmarkFile("sudoku/d1_test.csv", "daca_sudoku4x4_d1", "test", "sudoku_csv", 500,
                  "ef86c7c28ebef88484d85fda59b3909a7b621241aa1abf36343437dbc4a3ffb6"),
    BenchmarkFile("countdown/d1_cd3_test.jsonl", "daca_countdown_d1", "test", "jsonl", 256,
                  "9916f614621e26fb2b035ed4ea641e35e4fff0d533bb9b9c7bcaaa61017d88c6"),
    BenchmarkFile("jsonschemabench/Github_easy", "daca_jsonschemabench", "github_easy", "schema_dir", 1943),
    BenchmarkFile("jsonschemabench/Glaiveai2K", "daca_jsonschemabench", "glaiveai2k", "schema_dir", 1707),
)
_BY_REL = {f.rel: f for f in FILES}


def benchmark_file(rel: str) -> BenchmarkFile:
  """The catalogue entry of ``rel`` (a path under the data directory, ``gsm8k/test.jsonl``).

  Raises:
    DataError: ``rel`` is not a benchmark file of the catalogue (names the ones that are).
  """
  try:
    return _BY_REL[rel]
  except KeyError:
    raise DataError(f"{rel!r} is not a benchmark file this library knows as a TFDS split; the known "
                    f"ones are {sorted(_BY_REL)}") from None


def dataset_files(name: str) -> tuple[BenchmarkFile, ...]:
  """The files (splits) of TFDS dataset ``name``, in catalogue order.

  Raises:
    DataError: no such dataset (names the known ones).
  """
  if name not in DATASETS:
    raise DataError(f"unknown benchmark dataset {name!r}; the known ones are {sorted(DATASETS)}")
  return tuple(f for f in FILES if f.dataset == name)
