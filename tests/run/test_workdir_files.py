"""Workdir files written atomically and read defensively; damaged checkpoints detected."""
import glob
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from daca_jax import io_utils
from daca_jax.run.checkpoint import Checkpointer, CorruptCheckpointError
from daca_jax.run.checksum import tree_checksum
from daca_jax.errors import DataError
from daca_jax.run.metrics import MetricsWriter, read_metrics
from daca_jax.run.pipeline import run_main_job
from tests.smoke_config import smoke


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
  path = tmp_path / "results.json"
  io_utils.atomic_write_json(path, {"a": 1})
  assert json.loads(path.read_text()) == {"a": 1}

  def killed(*a, **k):
    raise KeyboardInterrupt  # the process dies between writing the temporary file and the rename

  monkeypatch.setattr(os, "replace", killed)
  with pytest.raises(KeyboardInterrupt):
    io_utils.atomic_write_json(path, {"a": 2, "long": "x" * 10000})
  assert json.loads(path.read_text()) == {"a": 1}
  assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # no temporary file left


def test_read_json_names_the_file_and_what_to_do(tmp_path):
  path = tmp_path / "config.json"
  path.write_text('{"rl": {"steps": 3')
  with pytest.raises(DataError, match=r"config\.json is damaged: not valid JSON .*; delete it to go on"):
    io_utils.read_json(path, fix="delete it to go on")
  path.write_text("[1, 2]")
  with pytest.raises(DataError, match=r"expected a JSON dict, found list"):
    io_utils.read_json(path, fix="x")
  path.write_bytes(b"\xff\xfe{}")
  with pytest.raises(DataError, match=r"not UTF-8"):
    io_utils.read_json(path, fix="x")
  logs = []
  assert io_utils.read_json_cache(tmp_path / "missing.json", logs.append) is None and not logs
  assert io_utils.read_json_cache(path, logs.append) is None
  assert len(logs) == 1 and "config.json is damaged" in logs[0] and "recomputing" in logs[0]


def test_metrics_log_with_a_garbage_line(tmp_path):
  path = tmp_path / "metrics.jsonl"
  path.write_text('{"step": 1, "x": 1}\ngarbage{\n{"step": 2, "x": 2}\n{"x": 5}\n{"step": 3, "x": 3}\n')
  with pytest.raises(DataError, match=r"metrics\.jsonl:2: malformed metrics line"):
    read_metrics(path)
  logs = []
  assert [r["step"] for r in read_metrics(path, log=logs.append)] == [1, 2, 3]
  assert len(logs) == 2 and ":2:" in logs[0] and ":4:" in logs[1]
  logs.clear()
  with MetricsWriter(path, log=logs.append) as w:  # a resumed run rewrites the log up to its step
    w.truncate_after(2)
    w.write(3, {"x": 30})
  assert path.read_text() == '{"step": 1, "x": 1}\n{"step": 2, "x": 2}\n{"step": 3, "x": 30}\n'
  assert len(logs) == 2


# --- checkpoints ------------------------------------------------------------------------------------


def _state():
  params = {"w": jax.random.normal(jax.random.key(0), (64, 96)), "b": jax.random.normal(jax.random.key(1), (96,))}
  return {"params": params, "opt_state": optax.adam(1e-3).init(params)}


def _largest_data_file(step_dir):
  return sorted(glob.glob(f"{step_dir}/state/ocdbt.process_0/d/*"), key=os.path.getsize)[-1]


def test_checksum_changes_with_any_single_value():
  state = _state()
  base = tree_checksum(state)
  assert tree_checksum(jax.tree.map(jnp.copy, state)) == base
  w = state["params"]["w"]
  for i in (0, 17, w.size - 1):
    bumped = w.reshape(-1).at[i].set(jnp.nextafter(w.reshape(-1)[i], jnp.inf)).reshape(w.shape)  # 1 ulp
    assert tree_checksum({**state, "params": {**state["params"], "w": bumped}}) != base
  mu_nan = state["opt_state"][0].mu["b"].at[3].set(jnp.nan)
  opt = (state["opt_state"][0]._replace(mu={**state["opt_state"][0].mu, "b": mu_nan}),) + state["opt_state"][1:]
  assert tree_checksum({**state, "opt_state": opt}) != base
  swapped = {**state, "params": {"w": state["params"]["w"][::-1], "b": state["params"]["b"]}}
  assert tree_checksum(swapped) != base


def test_host_checksum_equals_the_device_program_on_every_dtype(monkeypatch):
  from daca_jax.run import checksum
  rng = np.random.default_rng(0)
  tree = {"f32": jnp.asarray(rng.normal(size=(5, 7)), jnp.float32),
          "bf16": jnp.asarray(rng.normal(size=(9,)), jnp.bfloat16),
          "f16": jnp.asarray(rng.normal(size=(3,)), jnp.float16),
          "i8": jnp.asarray(rng.integers(-128, 127, size=(11,)), jnp.int8),
          "u16": jnp.asarray(rng.integers(0, 2**16, size=(4, 2)), jnp.uint16),
          "i32": jnp.asarray(rng.integers(-2**31, 2**31, size=(6,)), jnp.int32),
          "bool": jnp.asarray(rng.random(13) < 0.5),
          "c64": jnp.asarray(rng.normal(size=3) + 1j * rng.normal(size=3), jnp.complex64),
          "typed_key": jax.random.key(3), "raw_key": jax.random.PRNGKey(4),
          "np_f64": rng.normal(size=(4,)),  # canonicalised to float32 as jnp.asarray does
          "scalars": (3, 2.5, True), "empty": jnp.zeros((0, 3))}
  host = checksum._host_lanes(tree)
  assert host is not None
  np.testing.assert_array_equal(host, np.asarray(checksum._lanes(tree)))
  assert checksum.tree_checksum(tree) == f"{int(host[0]):08x}{int(host[1]):08x}"
  # Large trees go to the device program, with the same result.
  monkeypatch.setattr(checksum, "_HOST_MAX_BYTES", 0)
  assert checksum._host_lanes(tree) is None
  assert checksum.tree_checksum(tree) == f"{int(host[0]):08x}{int(host[1]):08x}"


@pytest.mark.parametrize("where", [0.2, 0.35, 0.5, 0.65, 0.8, 0.95])
def test_flipped_checkpoint_byte_is_never_restored_silently(tmp_path, where):
  state = _state()
  ck = Checkpointer(tmp_path, async_save=False)
  ck.save(1, state)
  ck.close()
  path = _largest_data_file(tmp_path / "1")
  raw = bytearray(open(path, "rb").read())
  raw[int(where * len(raw))] ^= 0x10
  open(path, "wb").write(raw)
  ck = Checkpointer(tmp_path)
  with pytest.raises(CorruptCheckpointError, match=r"checkpoint .*/1 (is damaged|cannot be read)"):
    ck.restore(1, state)
  ck.close()


def test_nan_written_into_adam_mu_is_detected(tmp_path):
  # Step 2's files hold a NaN in Adam's mu, but its metadata (and so its checksum) is step 1's:
  # what a silent corruption of the array files looks like to the reader.
  state = _state()
  adam = state["opt_state"][0]
  bad = {**state, "opt_state": (adam._replace(mu={**adam.mu, "w": adam.mu["w"].at[5, 5].set(jnp.nan)}),)
         + state["opt_state"][1:]}
  ck = Checkpointer(tmp_path, async_save=False)
  ck.save(1, state)
  ck.save(2, bad)
  ck.close()
  shutil.rmtree(tmp_path / "2" / "metadata")
  shutil.copytree(tmp_path / "1" / "metadata", tmp_path / "2" / "metadata")
  ck = Checkpointer(tmp_path)
  restored, _ = ck.restore(1, state)  # the intact one restores and verifies
  assert tree_checksum(restored) == tree_checksum(state)
  with pytest.raises(CorruptCheckpointError, match=r"/2 is damaged: the checksum of its 'opt_state' is [0-9a-f]{16}, it was"):
    ck.restore(2, state)
  ck.close()


def test_checkpoint_without_checksum_still_restores(tmp_path):
  state = _state()
  ck = Checkpointer(tmp_path, async_save=False)
  ck.save(1, state, {"pos": 3})
  ck.close()
  meta = glob.glob(f"{tmp_path}/1/metadata/metadata")[0]
  d = json.load(open(meta))
  json.dump({k: v for k, v in d.items() if not k.startswith("__state_")}, open(meta, "w"))  # older format
  ck = Checkpointer(tmp_path)
  restored, m = ck.restore(1, state)
  ck.close()
  assert m == {"pos": 3}
  np.testing.assert_array_equal(np.asarray(restored["params"]["w"]), np.asarray(state["params"]["w"]))


# --- the main job on damaged workdir files ----------------------------------------------------------


def test_main_job_rebuilds_or_names_damaged_workdir_files(tmp_path):
  quiet = lambda *a, **k: None
  first = run_main_job(smoke(sft__steps=20), tmp_path, show_progress=False, log=quiet)
  metrics = read_metrics(tmp_path / "metrics.jsonl")
  pristine = {n: (tmp_path / n).read_bytes() for n in ("results.json", "eval_before.json", "config.json")}

  def rerun():
    logs = []
    res = run_main_job(smoke(sft__steps=20), tmp_path, show_progress=False, log=logs.append)
    return res, logs

  # A results.json cut short by a kill is rebuilt (the cached phases keep their results).
  (tmp_path / "results.json").write_bytes(pristine["results.json"][:100])
  res, logs = rerun()
  assert any("results.json is damaged" in line for line in logs)
  assert res["eval_after"] == first["eval_after"]
  assert json.loads((tmp_path / "results.json").read_text())["eval_after"] == first["eval_after"]
  # A damaged evaluation cache is recomputed, with the same result (greedy decoding).
  (tmp_path / "eval_before.json").write_bytes(pristine["eval_before.json"][:50])
  res, logs = rerun()
  assert any("eval_before.json is damaged" in line and "recomputing" in line for line in logs)
  assert res["eval_before"] == first["eval_before"]
  assert json.loads((tmp_path / "eval_before.json").read_text())["metrics"] == first["eval_before"]
  # A damaged config.json cannot be rebuilt (it is what the rerun is compared with): one clear error.
  (tmp_path / "config.json").write_bytes(pristine["config.json"][:50])
  with pytest.raises(DataError, match=r"config\.json is damaged: not valid JSON.*use a new --workdir"):
    rerun()
  (tmp_path / "config.json").write_bytes(pristine["config.json"])
  # A garbage line in metrics.jsonl while the run resumes: dropped with a warning.
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  (tmp_path / "metrics.jsonl").write_text("\n".join([lines[0], "garbage{"] + lines[1:]) + "\n")
  shutil.rmtree(tmp_path / "rl" / "3")
  (tmp_path / "eval_after.json").unlink()
  res, logs = rerun()
  assert any("metrics.jsonl:2: skipped a malformed metrics line" in line for line in logs)
  assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]
  # A flipped byte in the latest RL checkpoint: set aside loudly, the run resumes from the one
  # before it and redoes the same (deterministic) step.
  path = _largest_data_file(tmp_path / "rl" / "3")
  raw = bytearray(open(path, "rb").read())
  raw[len(raw) // 2] ^= 0x40
  open(path, "wb").write(raw)
  (tmp_path / "eval_after.json").unlink()
  res, logs = rerun()
  assert any("rl/3 is unreadable" in line and "CorruptCheckpointError" in line for line in logs), logs
  assert "RL: resuming from iteration 2." in logs
  assert [r["reward_mean"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [r["reward_mean"] for r in metrics]
  assert res["eval_after"] == first["eval_after"]
