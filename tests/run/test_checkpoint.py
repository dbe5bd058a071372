"""Tests for daca_jax.run.checkpoint: exact round trips, retention, atomicity, errors."""
from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from daca_jax.run import checkpoint as ckpt_lib


def _train_state(seed: int = 0):
  """Params (nnx.State), adamw state over them after one update, a PRNG key and an int step."""
  model = nnx.Linear(3, 4, rngs=nnx.Rngs(seed))
  _, params = nnx.split(model, nnx.Param)
  tx = optax.adamw(1e-2)
  opt_state = tx.init(params)
  grads = jax.tree.map(lambda p: jnp.full_like(p, 0.5 + seed), params)
  updates, opt_state = tx.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  return {
      "params": params,
      "opt_state": opt_state,
      "key": jax.random.PRNGKey(seed + 17),
      "step": 10 + seed,
  }


def _zeros_like(state):
  """Same structure and dtypes as ``state`` but different values (so restore must fill them)."""
  return jax.tree.map(
      lambda x: jnp.zeros_like(x) if isinstance(x, jax.Array) else type(x)(0), state
  )


def _assert_same(actual, expected):
  assert jax.tree.structure(actual) == jax.tree.structure(expected)
  for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
    if isinstance(e, (int, float)):
      assert type(a) is type(e) and a == e
    else:
      assert np.asarray(a).dtype == np.asarray(e).dtype
      np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


@pytest.fixture
def ckpt(tmp_path):
  c = ckpt_lib.Checkpointer(tmp_path / "ckpt", max_to_keep=3)
  yield c
  c.close()


def test_round_trip_nnx_optax_key_step(ckpt):
  state = _train_state(0)
  meta = {"config": {"lr": 0.01, "name": "tiny"}, "data_pos": 123, "tags": ["a", "b"]}
  ckpt.save(5, state, meta)
  ckpt.wait()
  target = _zeros_like(state)
  restored, restored_meta = ckpt.restore(5, target)
  _assert_same(restored, state)
  assert isinstance(restored["params"], nnx.State)
  assert isinstance(restored["opt_state"][0], optax.ScaleByAdamState)
  assert isinstance(restored["opt_state"][0].mu, nnx.State)
  assert restored["key"].dtype == jnp.uint32
  assert restored_meta == meta
  # The restored key drives the same random stream as the saved one.
  np.testing.assert_array_equal(
      jax.random.normal(restored["key"], (4,)), jax.random.normal(state["key"], (4,))
  )


def test_restore_into_abstract_target(ckpt):
  state = _train_state(1)
  ckpt.save(1, state)
  abstract = jax.eval_shape(lambda: state)
  restored, meta = ckpt.restore(None, abstract)
  assert meta == {}
  assert jax.tree.structure(restored) == jax.tree.structure(state)
  for a, e in zip(jax.tree.leaves(restored), jax.tree.leaves(state), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


def test_typed_prng_key_and_bfloat16(ckpt):
  state = {"key": jax.random.key(3), "w": jnp.linspace(-1, 1, 5, dtype=jnp.bfloat16)}
  ckpt.save(0, state)
  restored, _ = ckpt.restore(0, {"key": jax.random.key(0), "w": jnp.zeros(5, jnp.bfloat16)})
  np.testing.assert_array_equal(
      jax.random.key_data(restored["key"]), jax.random.key_data(state["key"])
  )
  assert restored["w"].dtype == jnp.bfloat16
  np.testing.assert_array_equal(np.asarray(restored["w"]), np.asarray(state["w"]))


def test_latest_step_restore_none_and_max_to_keep(ckpt):
  assert ckpt.latest_step() is None
  assert ckpt.all_steps() == []
  for step in (0, 10, 20, 30, 40):
    ckpt.save(step, _train_state(step), {"step": step})
  assert ckpt.all_steps() == [20, 30, 40]
  assert ckpt.latest_step() == 40
  assert sorted(os.listdir(ckpt.directory)) == ["20", "30", "40"]
  restored, meta = ckpt.restore(None, _zeros_like(_train_state(0)))
  assert meta == {"step": 40}
  _assert_same(restored, _train_state(40))
  restored, meta = ckpt.restore(30, _zeros_like(_train_state(0)))
  assert meta == {"step": 30}
  _assert_same(restored, _train_state(30))


def test_reopen_directory_sees_previous_checkpoints(tmp_path):
  with ckpt_lib.Checkpointer(tmp_path, max_to_keep=2) as c:
    c.save(1, _train_state(1), {"k": 1})
    c.save(2, _train_state(2), {"k": 2})
  with ckpt_lib.Checkpointer(tmp_path, max_to_keep=2) as c:
    assert c.all_steps() == [1, 2]
    _, meta = c.restore(None, _zeros_like(_train_state(0)))
    assert meta == {"k": 2}
    c.save(3, _train_state(3))
    assert c.all_steps() == [2, 3]


def test_synchronous_mode(tmp_path):
  with ckpt_lib.Checkpointer(tmp_path, async_save=False) as c:
    c.save(7, {"x": jnp.arange(4)})
    # Without wait(): the step is already committed on disk.
    assert os.path.isfile(tmp_path / "7" / "commit_success.txt")
    assert c.restore(7, {"x": jnp.zeros(4, jnp.int32)})[0]["x"].tolist() == [0, 1, 2, 3]


def test_arrays_may_change_after_async_save_returns(ckpt):
  host = np.arange(50_000, dtype=np.float32)
  device = jnp.arange(50_000, dtype=jnp.float32)
  ckpt.save(1, {"host": host, "device": device})
  host[:] = -1.0  # modified in place before the background write has necessarily finished
  device.delete()  # what buffer donation does
  restored, _ = ckpt.restore(1, {"host": np.zeros(50_000, np.float32),
                                 "device": jnp.zeros(50_000, jnp.float32)})
  np.testing.assert_array_equal(restored["host"], np.arange(50_000, dtype=np.float32))
  np.testing.assert_array_equal(restored["device"], np.arange(50_000, dtype=np.float32))


def test_existing_step_skipped_unless_forced(ckpt):
  assert ckpt.save(3, {"x": jnp.ones(2)}, {"v": 1})
  assert not ckpt.save(3, {"x": jnp.full(2, 2.0)}, {"v": 2})
  restored, meta = ckpt.restore(3, {"x": jnp.zeros(2)})
  assert meta == {"v": 1} and restored["x"].tolist() == [1.0, 1.0]
  assert ckpt.save(3, {"x": jnp.full(2, 2.0)}, {"v": 2}, force=True)
  restored, meta = ckpt.restore(3, {"x": jnp.zeros(2)})
  assert meta == {"v": 2} and restored["x"].tolist() == [2.0, 2.0]


def test_restore_errors(tmp_path):
  empty = tmp_path / "empty"
  with ckpt_lib.Checkpointer(empty) as c:
    with pytest.raises(FileNotFoundError, match=str(empty)):
      c.restore(None, {"x": jnp.zeros(2)})
    c.save(1, {"x": jnp.zeros(2)})
    with pytest.raises(FileNotFoundError, match=r"step 2 .*available steps: \[1\]"):
      c.restore(2, {"x": jnp.zeros(2)})
    with pytest.raises(ValueError, match="does not match"):
      c.restore(1, {"y": jnp.zeros(2)})


def test_bad_arguments(ckpt):
  with pytest.raises(TypeError, match="JSON"):
    ckpt.save(1, {"x": jnp.zeros(2)}, {"bad": object()})
  with pytest.raises(ValueError, match=">= 0"):
    ckpt.save(-1, {"x": jnp.zeros(2)})
  with pytest.raises(ValueError):
    ckpt_lib.Checkpointer(ckpt.directory, max_to_keep=0)
  assert ckpt.all_steps() == []


def test_leftover_unfinished_directories_are_ignored_and_removed(tmp_path):
  with ckpt_lib.Checkpointer(tmp_path, max_to_keep=2) as c:
    c.save(5, {"x": jnp.arange(3)}, {"ok": True})
  # What a killed process leaves behind: an orbax tmp dir (with some data) for a newer step, and
  # a step directory without orbax's commit file (e.g. an interrupted copy).
  (tmp_path / "9.orbax-checkpoint-tmp-1700000000" / "state").mkdir(parents=True)
  (tmp_path / "9.orbax-checkpoint-tmp-1700000000" / "state" / "junk").write_text("x")
  (tmp_path / "8" / "state").mkdir(parents=True)
  (tmp_path / "8" / "_CHECKPOINT_METADATA").write_text("{}")
  (tmp_path / "not_a_step").mkdir()
  with ckpt_lib.Checkpointer(tmp_path, max_to_keep=2) as c:
    assert c.all_steps() == [5]
    assert c.latest_step() == 5
    restored, meta = c.restore(None, {"x": jnp.zeros(3, jnp.int32)})
    assert meta == {"ok": True} and restored["x"].tolist() == [0, 1, 2]
    assert sorted(os.listdir(tmp_path)) == ["5", "not_a_step"]
    # The steps of the removed leftovers can be saved normally.
    c.save(8, {"x": jnp.arange(3) + 8})
    c.save(9, {"x": jnp.arange(3) + 9})
    assert c.all_steps() == [8, 9]


def test_interrupted_save_is_never_listed(tmp_path, monkeypatch):
  """Simulates a process killed after writing all data but before orbax's final rename."""
  from orbax.checkpoint._src.path import atomicity

  with ckpt_lib.Checkpointer(tmp_path, async_save=False) as c:
    c.save(1, {"x": jnp.arange(3)})

  async def no_finalize(self, *args, **kwargs):
    del self, args, kwargs

  monkeypatch.setattr(atomicity.AtomicRenameTemporaryPath, "finalize", no_finalize)
  c = ckpt_lib.Checkpointer(tmp_path, async_save=False)
  try:
    c.save(2, {"x": jnp.arange(3) + 2})
  except Exception:  # orbax may notice the missing directory; what matters is what is listed
    pass
  leftovers = [n for n in os.listdir(tmp_path) if n.startswith("2.")]
  assert leftovers and ".orbax-checkpoint-tmp" in leftovers[0]
  assert not (tmp_path / "2").exists()
  assert c.latest_step() == 1
  monkeypatch.undo()
  with ckpt_lib.Checkpointer(tmp_path) as c2:
    assert c2.all_steps() == [1]
    assert c2.restore(None, {"x": jnp.zeros(3, jnp.int32)})[0]["x"].tolist() == [0, 1, 2]
    assert sorted(os.listdir(tmp_path)) == ["1"]


def test_save_pytree_load_pytree(tmp_path):
  path = tmp_path / "cache" / "sft_params"
  state = _train_state(2)["params"]
  assert not ckpt_lib.pytree_exists(path)
  with pytest.raises(FileNotFoundError, match="sft_params"):
    ckpt_lib.load_pytree(path, state)
  ckpt_lib.save_pytree(path, state)
  assert ckpt_lib.pytree_exists(path)
  assert os.listdir(path.parent) == ["sft_params"]  # no tmp directory left behind
  restored = ckpt_lib.load_pytree(path, _zeros_like(state))
  assert isinstance(restored, nnx.State)
  _assert_same(restored, state)
  with pytest.raises(FileExistsError):
    ckpt_lib.save_pytree(path, state)
  other = _train_state(3)["params"]
  ckpt_lib.save_pytree(path, other, force=True)
  _assert_same(ckpt_lib.load_pytree(path, state), other)


def test_load_pytree_ignores_unfinished(tmp_path):
  path = tmp_path / "warm"
  (tmp_path / "warm.orbax-checkpoint-tmp-123").mkdir()
  with pytest.raises(FileNotFoundError):
    ckpt_lib.load_pytree(path, {"x": jnp.zeros(2)})
  path.mkdir()  # exists, but without orbax's commit file
  with pytest.raises(FileNotFoundError):
    ckpt_lib.load_pytree(path, {"x": jnp.zeros(2)})
  ckpt_lib.save_pytree(path, {"x": jnp.ones(2)})  # replaces both leftovers
  assert sorted(os.listdir(tmp_path)) == ["warm"]
  assert ckpt_lib.load_pytree(path, {"x": jnp.zeros(2)})["x"].tolist() == [1.0, 1.0]


def test_metadata_is_plain_json_on_disk(ckpt):
  ckpt.save(4, {"x": jnp.zeros(1)}, {"config": {"a": [1, 2]}, "pos": 7})
  ckpt.wait()
  files = []
  for root, _, names in os.walk(os.path.join(ckpt.directory, "4", "metadata")):
    files += [os.path.join(root, n) for n in names if n != "commit_success.txt"]
  # The user's metadata, plus the state checksum under reserved keys.
  on_disk = [json.load(open(f)) for f in files if not os.path.basename(f).startswith("_")]
  assert any({k: v for k, v in d.items() if not k.startswith("__state_")} == {"config": {"a": [1, 2]}, "pos": 7}
             and set(d) - {"config", "pos"} == {"__state_integrity__"} for d in on_disk)
