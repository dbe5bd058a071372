"""A workdir on Google Cloud Storage, against a local GCS server (tests/gcs_server.py, started here).

The file layer (daca_jax.storage) on gs://, the workdir lease with real processes, and the main job: a smoke
run on gs:// is killed (SIGKILL), resumed by the same command, and ends with the metrics, evaluations and
final parameters of the same run on local disk; evaluate.py reads that workdir.
"""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time

import jax
import numpy as np
import pytest

from tests.gcs_server import client_env

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUCKET = "daca-test"
_MISSING = [m for m in ("gcsfs", "gcp_storage_emulator", "etils") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(bool(_MISSING), reason=f"needs {_MISSING} (pip install -e '.[test]')")


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
  """The server's environment, set in this process too (the subprocesses get it through ``os.environ``)."""
  port = _free_port()
  log = tmp_path_factory.mktemp("gcs") / "server.log"  # a file: a pipe nobody reads would fill and stall it
  server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "gcs_server.py"), str(port), BUCKET],
                            stdout=subprocess.DEVNULL, stderr=log.open("w"))
  deadline = time.time() + 60
  while True:
    try:
      socket.create_connection(("127.0.0.1", port), timeout=1).close()
      break
    except OSError:
      if server.poll() is not None or time.time() > deadline:
        server.kill()
        pytest.fail(f"the GCS test server did not start: {log.read_text()[-2000:]}")
      time.sleep(0.1)
  env = client_env(port)
  saved = {k: os.environ.get(k) for k in env}
  os.environ.update(env)
  try:
    yield env
  finally:
    for k, v in saved.items():
      if v is None:
        os.environ.pop(k, None)
      else:
        os.environ[k] = v
    server.kill()  # in memory: nothing to save (it does not stop on SIGTERM while a client holds a connection)
    server.wait(timeout=30)


def test_the_file_layer_on_gcs(gcs):
  from daca_jax import storage

  base = f"gs://{BUCKET}/layer"
  storage.write_bytes(f"{base}/a.json", b"{}")
  storage.write_bytes(f"{base}/a.json", b'{"x": 1}')  # replaced whole
  assert storage.read_bytes(f"{base}/a.json") == b'{"x": 1}'
  assert storage.read_bytes(f"{base}/a.json", limit=2) == b'{"x'
  storage.append_bytes(f"{base}/m.jsonl", b"1\n")
  storage.append_bytes(f"{base}/m.jsonl", b"2\n")
  assert storage.read_bytes(f"{base}/m.jsonl") == b"1\n2\n"
  storage.write_bytes(f"{base}/sub/b", b"b")
  assert storage.listdir(base) == ["a.json", "m.jsonl", "sub"] and storage.is_dir(f"{base}/sub")
  assert storage.is_file(f"{base}/a.json") and not storage.is_file(f"{base}/sub")
  assert abs(storage.mtime(f"{base}/a.json") - time.time()) < 60 and storage.mtime(f"{base}/none") is None
  storage.move_tree(f"{base}/sub", f"{base}/moved")
  assert storage.listdir(base) == ["a.json", "m.jsonl", "moved"] and storage.read_bytes(f"{base}/moved/b") == b"b"
  # created only if absent, also when several writers race: exactly one wins
  winners = []

  def create(i):
    try:
      storage.create_new(f"{base}/lock", str(i).encode())
      winners.append(i)
    except FileExistsError:
      pass

  threads = [threading.Thread(target=create, args=(i,)) for i in range(6)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert len(winners) == 1 and storage.read_bytes(f"{base}/lock") == str(winners[0]).encode()
  with pytest.raises(FileExistsError, match="lock"):
    storage.create_new(f"{base}/lock", b"again")
  storage.rmtree(base)
  assert storage.listdir(base) == [] and not storage.exists(f"{base}/a.json")
  with pytest.raises(OSError, match="bucket 'no-such-bucket' does not exist"):
    storage.probe_write("gs://no-such-bucket/run")


APPENDER = r"""
import sys
from daca_jax import storage
for i in range(int(sys.argv[3])):
  storage.append_bytes(sys.argv[1], f"{sys.argv[2]}-{i}\n".encode())
"""


def test_appends_from_concurrent_writers_on_gcs_are_all_kept(gcs):
  """GCS cannot append: an append reads the object and writes it back whole. Four processes appending at once
  keep every line, each once (the write-back is conditional on the generation that was read)."""
  from daca_jax import storage

  path, writers, lines = f"gs://{BUCKET}/append/log.jsonl", 4, 6
  procs = [subprocess.Popen([sys.executable, "-c", APPENDER, path, str(w), str(lines)], env=os.environ.copy(),
                            stderr=subprocess.PIPE, text=True) for w in range(writers)]
  for proc in procs:
    assert proc.wait(timeout=300) == 0, proc.stderr.read()[-2000:]
  got = storage.read_bytes(path).decode().splitlines()
  assert sorted(got) == sorted(f"{w}-{i}" for w in range(writers) for i in range(lines))
  for w in range(writers):  # each writer's lines in its own order
    assert [x for x in got if x.startswith(f"{w}-")] == [f"{w}-{i}" for i in range(lines)]


HOLDER = r"""
import sys, time
from daca_jax.run.lease import WorkdirLease
WorkdirLease(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_the_lease_on_gcs_is_refused_while_held_and_taken_over_from_a_killed_holder(gcs):
  from daca_jax import storage
  from daca_jax.errors import ConfigError
  from daca_jax.run import lease as lease_mod

  workdir = f"gs://{BUCKET}/leased"
  holder = subprocess.Popen([sys.executable, "-c", HOLDER, workdir], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "JAX_PLATFORMS": "cpu"})
  try:
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(ConfigError, match=rf"--workdir=.*run \w+ \(host .*pid {holder.pid}.*holds it"):
      lease_mod.WorkdirLease(workdir).acquire()
    with pytest.raises(ConfigError, match=f"pid {holder.pid}"):
      lease_mod.check_free(workdir)
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  said = []
  with lease_mod.WorkdirLease(workdir, said.append) as lease:  # kill -9 left the lease: its process is gone
    record = json.loads(storage.read_bytes(f"{workdir}/{lease_mod.LEASE_FILE}"))
    assert record["run_id"] == lease.run_id and record["pid"] == os.getpid()
  assert len(said) == 1 and "taking over" in said[0] and "its process is gone" in said[0]
  assert storage.listdir(workdir) == []  # released, and no mutex left


RL_STEPS = 6
FIELDS = {"rl.steps": RL_STEPS, "checkpoint.every": 2, "task.num_eval_examples": 8, "eval.batch_size": 8,
          "sft.steps": 10, "sft.num_train_examples": 40}
FLAGS = ["--config=configs/sudoku_tiny.py:smoke", "--progress=false"] + [f"--config.{k}={v}" for k, v in FIELDS.items()]
TIMING = {"rollout_s", "update_s", "rollout_tokens_per_s", "includes_compile"}


def _untimed(tree):
  """``tree`` without its wall-clock entries (``seconds``, ``decode_seconds``, ``tokens_per_s``)."""
  if isinstance(tree, dict):
    return {k: _untimed(v) for k, v in tree.items() if k not in ("seconds", "decode_seconds", "tokens_per_s")}
  return tree


def _final_params(workdir) -> tuple[int, list[np.ndarray]]:
  from daca_jax.run.eval_models import read_trained_params

  trained = read_trained_params(workdir, "rl")
  return trained.step, [np.asarray(x) for x in jax.tree.leaves(trained.base)]


def test_a_run_on_gcs_killed_and_resumed_equals_the_run_on_local_disk(gcs, tmp_path):
  from daca_jax import storage
  from daca_jax.run.metrics import read_metrics

  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  local, remote = tmp_path / "local", f"gs://{BUCKET}/run"
  done = subprocess.run([sys.executable, "experiments/train.py", f"--workdir={local}"] + FLAGS, cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=240)
  assert done.returncode == 0, done.stderr[-3000:]
  cmd = [sys.executable, "experiments/train.py", f"--workdir={remote}"] + FLAGS
  killed = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  deadline = time.time() + 600
  while killed.poll() is None and time.time() < deadline:  # kill -9 once iteration 3 is logged on the bucket
    try:  # (and the asynchronous save of iteration 2 committed, so that there is something to resume)
      if (len(storage.read_bytes(f"{remote}/metrics.jsonl").splitlines()) >= 3
          and storage.exists(f"{remote}/rl/2/commit_success.txt")):
        break
    except FileNotFoundError:
      pass
    time.sleep(0.02)
  assert killed.poll() is None, "the run ended before it could be killed: " + killed.communicate()[1][-2000:]
  killed.send_signal(signal.SIGKILL)
  killed.communicate()
  assert not storage.exists(f"{remote}/results.json")
  again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
  assert again.returncode == 0, again.stderr[-3000:]
  assert "its process is gone" in again.stdout and "RL: resuming from iteration" in again.stdout, again.stdout[-2000:]
  # the same run: metrics (timings aside), the SFT log, the evaluations with their outcomes, the final weights
  a, b = read_metrics(local / "metrics.jsonl"), read_metrics(f"{remote}/metrics.jsonl")
  assert [r["step"] for r in b] == list(range(1, RL_STEPS + 1))
  assert [{k: v for k, v in r.items() if k not in TIMING} for r in a] == \
      [{k: v for k, v in r.items() if k not in TIMING} for r in b]
  assert read_metrics(local / "sft_metrics.jsonl") == read_metrics(f"{remote}/sft_metrics.jsonl")
  res_local = json.loads((local / "results.json").read_text())
  res_remote = json.loads(storage.read_bytes(f"{remote}/results.json"))
  for k in ("eval_before", "eval_after"):
    assert res_local[k] == res_remote[k], k
  for name in ("eval_before.outcomes.jsonl", "eval_after.outcomes.jsonl"):
    assert (local / name).read_bytes() == storage.read_bytes(f"{remote}/{name}")
  (step_a, want), (step_b, got) = _final_params(local), _final_params(remote)
  assert step_a == step_b == RL_STEPS
  for x, y in zip(want, got, strict=True):
    np.testing.assert_array_equal(x, y)
  assert storage.listdir(f"{remote}/tb") == ["eval", "rl", "sft"]  # TensorBoard wrote there too
  assert not storage.exists(f"{remote}/lease.json")
  # evaluate.py reads the bucket's workdir as it reads the local one
  summaries = []
  for workdir, out in ((local, tmp_path / "ev_local"), (remote, tmp_path / "ev_remote")):
    ev = subprocess.run([sys.executable, "experiments/evaluate.py", f"--workdir={workdir}", "--tasks=sudoku4x4",
                         f"--output_dir={out}", "--num_examples=4", "--gen_lengths=32", "--progress=false"],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert ev.returncode == 0, ev.stderr[-3000:]
    summaries.append(json.loads((out / "summary.json").read_text()))
  assert _untimed(summaries[0]["tasks"]) == _untimed(summaries[1]["tasks"])
  assert summaries[1]["checkpoint"]["path"] == remote and summaries[1]["checkpoint"]["step"] == RL_STEPS


@pytest.mark.parametrize("workdir, says", [
    ("gs://no-such-bucket/run", "bucket 'no-such-bucket' does not exist"),
    ("gs://Bad_Bucket/run", "'Bad_Bucket' has not"),
    (f"gs://{BUCKET}", "not the bucket itself"),
    ("s3://bucket/run", "the only URL scheme a workdir may have"),
])
def test_a_bad_bucket_workdir_is_one_line_before_any_work(gcs, workdir, says):
  run = subprocess.run([sys.executable, "experiments/train.py", f"--workdir={workdir}"] + FLAGS, cwd=ROOT,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True, timeout=300)
  errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
  assert run.returncode == 2 and len(errors) == 1 and says in errors[0], run.stderr[-2000:]
  assert "Traceback" not in run.stderr


def _upload(folder: pathlib.Path, url: str) -> None:
  """Copies local ``folder`` into the bucket at ``url``, object by object."""
  from daca_jax import storage

  for path in sorted(folder.rglob("*")):
    if path.is_file():
      storage.write_bytes(f"{url}/{path.relative_to(folder).as_posix()}", path.read_bytes())


def test_export_hf_reads_a_workdir_in_a_bucket(gcs, tmp_path):
  """A run from a Hugging Face checkpoint, its workdir in a bucket: the export equals the export of the same
  workdir on local disk, file for file (the provenance record names each its own workdir)."""
  pytest.importorskip("safetensors.numpy")
  pytest.importorskip("tokenizers")
  from daca_jax.run.export import PROVENANCE_FILE, export_workdir
  from tests.run.test_export_hf import _source, _workdir

  ckpt = _source(tmp_path / "src", "llada")
  local, _, _ = _workdir(tmp_path / "wd", ckpt, lora_rank=2)
  remote = f"gs://{BUCKET}/hf_run"
  _upload(local, remote)
  exports = {}
  for name, workdir in (("local", local), ("remote", remote)):
    out = tmp_path / f"export_{name}"
    export_workdir(workdir, out, log=lambda *_: None)
    exports[name] = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
  assert set(exports["local"]) == set(exports["remote"]) and len(exports["local"]) > 3
  for name in exports["local"]:
    if name != PROVENANCE_FILE:
      assert exports["local"][name] == exports["remote"][name], name
  assert json.loads(exports["remote"][PROVENANCE_FILE])["workdir"] == remote


def test_tfds_datasets_built_into_a_bucket_read_as_the_local_files(gcs, tmp_path, monkeypatch):
  """build_tfds into gs:// (built in a local copy, uploaded), then a host with an empty cache reads the bucket's
  datasets: the same task examples as the local files. A dataset cut short in the bucket is refused in one line."""
  pytest.importorskip("tensorflow_datasets")
  pytest.importorskip("array_record")
  from daca_jax import storage
  from daca_jax.data import sources, tfds_builders
  from daca_jax.errors import DataError
  from daca_jax.tasks.base import make_task
  from tests.tiny_data import shared_data

  shared = shared_data()
  if shared is None:
    pytest.skip("../shared/data is absent")
  url = f"gs://{BUCKET}/tfds"
  monkeypatch.setenv(sources.CACHE_ENV, str(tmp_path / "builder_cache"))
  said = []
  tfds_builders.build(["daca_sudoku4x4_d1", "daca_gsm8k"], url, str(shared), log=said.append)
  assert sum("uploaded to" in s for s in said) == 2
  assert storage.exists(f"{url}/daca_gsm8k/{sources.catalog.DATASETS['daca_gsm8k'].version}/dataset_info.json")
  monkeypatch.setenv(sources.CACHE_ENV, str(tmp_path / "host_cache"))  # another host: nothing local yet
  digest = lambda examples: [(e.prompt, e.target) for e in examples]  # noqa: E731
  for name in ("sudoku4x4", "gsm8k"):
    local = make_task(name, data_dir=str(shared))
    remote = make_task(name, data_dir=sources.TFDSFiles(url))
    assert digest(local.eval_examples()[0]) == digest(remote.eval_examples()[0])
  assert (tmp_path / "host_cache" / BUCKET / "tfds" / "daca_gsm8k").is_dir()
  # a records file cut in half in the bucket: the host's copy is refreshed, and the read refuses it
  version = sources.catalog.DATASETS["daca_sudoku4x4_d1"].version
  folder = f"{url}/daca_sudoku4x4_d1/{version}"
  records = [n for n in storage.listdir(folder) if "array_record" in n][0]
  data = storage.read_bytes(f"{folder}/{records}")
  storage.write_bytes(f"{folder}/{records}", data[:len(data) // 2])
  with pytest.raises(DataError, match="daca_sudoku4x4_d1.*cannot be read|daca_sudoku4x4_d1.*records"):
    sources.TFDSFiles(url).sudoku_rows("sudoku/d1_test.csv")
  with pytest.raises(DataError, match="holds no datasets"):
    sources.TFDSFiles(f"gs://{BUCKET}/empty")
  # a dataset the bucket lacks: the message and the build command it suggests name the bucket, not this host's
  # copy (a build into the copy would never reach the other hosts)
  with pytest.raises(DataError) as missing:
    sources.TFDSFiles(url).json_records("mbpp/test.json")
  assert f"in {url}: not built there (build it: python experiments/build_tfds.py --tfds_dir={url} " \
         "--datasets=daca_mbpp)" in str(missing.value) and "host_cache" not in str(missing.value)
  # an object whose name climbs out of the dataset's folder (GCS allows such names; the local server does not
  # store them, so the listing is stood in for) is refused, and nothing is written outside the copy
  monkeypatch.setattr(storage, "list_files", lambda folder: {"1.0.0/../../../escape": (1, None)})
  with pytest.raises(DataError, match=r"daca_gsm8k holds an object named '1\.0\.0/\.\./\.\./\.\./escape'"):
    sources.mirror_dataset(url, tmp_path / "host_cache" / "x", "daca_gsm8k")
  assert not list(tmp_path.rglob("escape"))


@pytest.mark.slow  # 1-2 min; the one-process run on gs:// above covers the file layer
def test_two_processes_on_a_bucket_equal_one_process_on_local_disk(gcs, tmp_path):
  """A pod's layout: 2 processes x 2 CPU devices, the workdir and the TFDS datasets in the bucket (process 0
  writes the files and holds the lease; both read checkpoints from it), against 1 process x 4 devices on
  local disk reading the files: the same metrics and evaluations."""
  pytest.importorskip("tensorflow_datasets")
  from daca_jax import storage
  from daca_jax.data import tfds_builders
  from daca_jax.run.metrics import read_metrics
  from tests.parallel.test_parallel import _free_port
  from tests.tiny_data import shared_data

  if shared_data() is None:
    pytest.skip("../shared/data is absent")
  url = f"gs://{BUCKET}/pod"
  env = dict(os.environ, JAX_PLATFORMS="cpu", DACA_TFDS_CACHE=str(tmp_path / "cache"))
  tfds_builders.build(["daca_sudoku4x4_d1"], f"{url}/tfds", str(shared_data()), log=lambda _: None)
  flags = ["--config=configs/sudoku_tiny.py:smoke", "--progress=false", "--config.parallel.strategy=pmap",
           "--config.rl.steps=2", "--config.sft.steps=10", "--config.task.num_eval_examples=8",
           "--config.eval.batch_size=8"]
  cmd = [sys.executable, "experiments/train.py"] + flags
  multi = dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_COORDINATOR_ADDRESS=f"localhost:{_free_port()}", JAX_NUM_PROCESSES="2")
  procs = [subprocess.Popen(cmd + [f"--workdir={tmp_path / 'one'}"], cwd=ROOT, text=True,
                            env=dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=4"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)]
  procs += [subprocess.Popen(cmd + [f"--workdir={url}/run", "--config.data.source=tfds",
                                    f"--config.data.tfds_dir={url}/tfds"], cwd=ROOT, text=True,
                             env=dict(multi, JAX_PROCESS_ID=str(i)), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for i in range(2)]
  outs = [p.communicate(timeout=600) for p in procs]
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  one, two = read_metrics(tmp_path / "one" / "metrics.jsonl"), read_metrics(f"{url}/run/metrics.jsonl")
  assert [r["step"] for r in two] == [1, 2]
  for a, b in zip(one, two):
    assert a["reward_mean"] == b["reward_mean"]
    for k in ("loss", "kl", "grad_norm"):
      assert b[k] == pytest.approx(a[k], rel=1e-5, abs=1e-7), k
  res_one = json.loads((tmp_path / "one" / "results.json").read_text())
  res_two = json.loads(storage.read_bytes(f"{url}/run/results.json"))
  assert res_one["eval_before"] == res_two["eval_before"] and res_one["eval_after"] == res_two["eval_after"]
  assert not storage.exists(f"{url}/run/lease.json")


def test_executables_compiled_ahead_into_a_bucket_are_loaded_from_it(gcs):
  """train.py --compile_only writes a gs:// workdir's executables into the bucket, and the run loads them there
  (the learner and programs of tests/parallel/test_aot.py)."""
  from daca_jax import storage
  from daca_jax.parallel import aot
  from daca_jax.rl.learner import GRPOLearner
  from tests.parallel.test_aot import EOS, MASK, _cfg, _compile_ahead, _inputs, _iteration, jax_logits

  folder = f"gs://{BUCKET}/aot_run/executables"
  _compile_ahead(folder, _cfg())
  assert storage.listdir(folder) == [aot.MANIFEST, "rollout.xla", "update.xla"]
  lines = []
  learner = GRPOLearner(jax_logits, _cfg(), mask_id=MASK, eos_id=EOS)
  assert aot.attach(folder, learner.aot_slots, lines.append)
  got = jax.tree.leaves(_iteration(learner, *_inputs()))
  assert lines == ["rollout: running the executable compiled ahead of time (no compile)",
                   "update: running the executable compiled ahead of time (no compile)"]
  want = jax.tree.leaves(_iteration(GRPOLearner(jax_logits, _cfg(), mask_id=MASK, eos_id=EOS), *_inputs()))
  for a, b in zip(got, want, strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_workdir_that_is_an_object_of_the_bucket_is_refused(gcs):
  from daca_jax import storage
  from daca_jax.config.train import TrainConfig
  from daca_jax.errors import ConfigError
  from daca_jax.run.pipeline import run_main_job

  storage.write_bytes(f"gs://{BUCKET}/an_object", b"x")
  with pytest.raises(ConfigError, match=r"^workdir='gs://daca-test/an_object' .*a folder; it is an object"):
    run_main_job(TrainConfig(), f"gs://{BUCKET}/an_object", show_progress=False, log=lambda *_: None)
  assert storage.listdir(f"gs://{BUCKET}/an_object") == []  # nothing written beside it
