"""Mesh, shardings and the pmap / fsdp updates.

The equivalence test runs this file as a child process with 8 simulated CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=8`` must be set before JAX starts, so it cannot
share the pytest process); the child prints the measured differences as JSON.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.errors import ConfigError
from daca_jax.parallel import (fsdp_spec, global_batch, make_mesh, maybe_initialize, mesh_shape,
                               per_sequence_keys, process_slice)
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.rldf import RLDFConfig
from daca_jax.likelihood.stratified import StratifiedConfig
from daca_jax.config.parallel import ParallelConfig

MESHES = ((8, 1, 1), (2, 4, 1))  # fsdp unsharded, and sharded beside a data axis: the two code paths
SLOW_MESHES = MESHES + ((1, 8, 1),)  # all FSDP (the slow test; the same path as 2 x 4 x 1)
TOL = 1e-5
# 8 simulated devices; the cheaper CPU code generation halves the child's compile time (the same
# flags apply to the one-device references, which run in the same process); see _RENDEZVOUS_ABORT for
# the scheduler flag.
XLA_FLAGS = ("--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0 "
             "--xla_llvm_disable_expensive_passes=true --xla_cpu_enable_concurrency_optimized_scheduler=false")


# With XLA's concurrency-optimised CPU scheduler the simulated devices of one FSDP update could enter
# independent collectives in different orders and deadlock (seen: 6 of 8 devices waiting in an
# all-gather, 2 in an all-reduce; XLA aborts after 40 s, "Termination timeout for ... rendezvous");
# XLA_FLAGS above turns that scheduler off. Should an abort still happen, the run is retried; any
# other failure is not.
_RENDEZVOUS_ABORT = "Termination timeout for"


def _run_child(args, env, timeout, attempts=3):
  for _ in range(attempts):
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode == 0 or _RENDEZVOUS_ABORT not in proc.stderr:
      return proc
  return proc


def _setup():
  """Tiny model and the real method: diffu_grpo, DPS weights, stratified likelihood (K = 4)."""
  from daca_jax.models.llada import init_model, make_logits_fn
  from daca_jax.config.rl import RLConfig
  from daca_jax.config.rollout import RolloutConfig
  from daca_jax.config.train import TrainConfig
  from daca_jax.config.model import tiny_config

  cfg = TrainConfig(model=tiny_config(), rollout=RolloutConfig(gen_length=16, block_length=8, steps=8),
                    likelihood=LikelihoodConfig(stratified=StratifiedConfig(num_strata=4)),
                    rl=RLConfig(objective="diffu_grpo", credit="dps", likelihood="stratified",
                                prompts_per_step=4, group_size=4, num_iterations=1, beta=0.04,
                                learning_rate=1e-4, warmup_steps=0))
  graphdef, params = init_model(cfg.model, seed=0)
  rng = np.random.default_rng(0)
  prompts = np.repeat(rng.integers(0, 256, size=(cfg.rl.prompts_per_step, 8)), cfg.rl.group_size, axis=0)
  return cfg, make_logits_fn(graphdef), params, jnp.asarray(prompts, jnp.int32)


def _run(update, params, opt_state, batch, steps: int = 2):
  """``steps`` updates on one rollout batch (new key each); (metrics per update, final params)."""
  traj, rewards, weights, ref = batch
  opt_state = jax.tree.map(jnp.copy, opt_state)  # compiled updates donate the optimizer state
  metrics = []
  for t in range(steps):
    params, opt_state, m = update(params, opt_state, ref, traj, rewards, weights,
                                  jax.random.fold_in(jax.random.PRNGKey(7), t))
    metrics.append({k: float(v) for k, v in m.items()})
  return metrics, params


def _max_diff(a, b) -> float:
  return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in
             zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def child(meshes=MESHES) -> dict:
  """Runs in the 8-device process: one-device references vs pmap / fsdp learners on every mesh."""
  import dataclasses

  from daca_jax.rl.learner import GRPOLearner

  assert jax.device_count() == 8, jax.devices()
  cfg, logits_fn, params, prompts = _setup()
  make = lambda pcfg, **rl: GRPOLearner(logits_fn, dataclasses.replace(cfg, parallel=pcfg,
                                                                       rl=dataclasses.replace(cfg.rl, **rl)),
                                        mask_id=cfg.model.mask_token_id, eos_id=258)
  one = make(ParallelConfig())
  key = jax.random.PRNGKey(3)
  traj = one.rollout(params, prompts, key)
  rewards = jnp.asarray(np.random.default_rng(1).choice([0.0, 0.5, 1.0], size=prompts.shape[0]), jnp.float32)
  batch = (traj, rewards, one.credit_weights(traj), params)  # reference policy = initial params
  opt0 = one.init_opt_state(params)
  # References on one device: the plain learner (fsdp must match it), and the same update with
  # per-sequence likelihood keys (the masks pmap draws, whatever the device count).
  refs = {"fsdp": _run(jax.jit(one._update), params, opt0, batch)}
  from daca_jax.likelihood import LIKELIHOOD
  from daca_jax.rl.update import make_update
  seq = make_update(logits_fn, one.cfg, one.optimizer, mask_id=cfg.model.mask_token_id,
                    estimator=per_sequence_keys(LIKELIHOOD.get(cfg.rl.likelihood)))
  refs["pmap"] = _run(jax.jit(seq), params, opt0, batch)
  out = {"params_moved": _max_diff(refs["fsdp"][1], params), "grad_norm": refs["fsdp"][0][0]["grad_norm"],
         "pmap": {}, "fsdp": {}}
  for shape in meshes:
    for strategy in ("fsdp", "pmap") if shape == meshes[0] else ("fsdp",):  # pmap uses the data axis only
      learner = make(ParallelConfig(strategy=strategy, data=shape[0], fsdp=shape[1], tensor=shape[2]))
      metrics, got = _run(learner.update, params, opt0, batch)
      ref_m, ref_p = refs[strategy]
      out[strategy]["x".join(map(str, shape))] = {
          "loss": max(abs(m["loss"] - r["loss"]) for m, r in zip(metrics, ref_m)),
          "metrics": max(abs(m[k] - r[k]) for m, r in zip(metrics, ref_m) for k in r),
          "params": _max_diff(got, ref_p),
          # where the updated parameters live: all 8 devices; FSDP-sharded leaves (0 = replicated)
          "devices": len(set().union(*(x.sharding.device_set for x in jax.tree.leaves(got)))),
          "sharded_leaves": sum(not x.sharding.is_fully_replicated for x in jax.tree.leaves(got))}
  # Gradient accumulation (rl.grad_accum = 2: micro-batches of 8 rows, each split over the 8 devices)
  # takes the update of the one-device reference with per-sequence keys.
  out["grad_accum"] = {}
  for strategy, shape in (("pmap", (8, 1, 1)), ("fsdp", (2, 4, 1))):
    learner = make(ParallelConfig(strategy=strategy, data=shape[0], fsdp=shape[1]), grad_accum=2)
    metrics, got = _run(learner.update, params, opt0, batch)
    ref_m, ref_p = refs["pmap"]
    out["grad_accum"][strategy] = {"loss": max(abs(m["loss"] - r["loss"]) for m, r in zip(metrics, ref_m)),
                                   "metrics": max(abs(m[k] - r[k]) for m, r in zip(metrics, ref_m) for k in r),
                                   "params": _max_diff(got, ref_p)}
  # The rollout split over 2 x 4 devices with FSDP-sharded parameters samples the same tokens, in one
  # call and in micro-batches of 8 rows (rl.rollout_batch).
  for name, rl in (("rollout_tokens_differing", {}), ("micro_rollout_tokens_differing", {"rollout_batch": 8})):
    sharded = make(ParallelConfig(strategy="fsdp", data=2, fsdp=4), **rl).rollout
    out[name] = int(np.sum(np.asarray(sharded(params, prompts, key).tokens) != np.asarray(traj.tokens)))
  try:  # 12 rows do not split over 8 devices: a ConfigError before anything is compiled
    learner.update(params, opt0, params, traj, rewards[:12], batch[2][:12], key)
    out["bad_batch_error"] = ""
  except ConfigError as e:
    out["bad_batch_error"] = str(e)
  return out


@pytest.mark.parametrize("meshes", [MESHES, pytest.param(SLOW_MESHES, marks=pytest.mark.slow)],
                         ids=["two_meshes", "three_meshes"])
def test_pmap_and_fsdp_match_one_device_on_8_devices(meshes):
  env = dict(os.environ, XLA_FLAGS=XLA_FLAGS, JAX_PLATFORMS="cpu")
  t0 = time.time()
  proc = _run_child([sys.executable, __file__, "--child"] + ["--all-meshes"] * (meshes == SLOW_MESHES), env,
                    timeout=600)
  assert proc.returncode == 0, proc.stderr[-4000:]
  res = json.loads(proc.stdout.strip().splitlines()[-1])
  print(json.dumps(res, indent=1), f"{time.time() - t0:.1f} s")
  assert res["params_moved"] > 1e-4 and res["grad_norm"] > 1e-3  # the updates did something
  assert sorted(res["pmap"]) == ["8x1x1"], res
  assert sorted(res["fsdp"]) == sorted("x".join(map(str, m)) for m in meshes), res
  for strategy in ("pmap", "fsdp"):
    for name in res[strategy]:
      for what in ("loss", "metrics", "params"):
        assert res[strategy][name][what] < TOL, (strategy, name, what, res)
      assert res[strategy][name]["devices"] == 8, res
  assert res["pmap"]["8x1x1"]["sharded_leaves"] == 0, res
  for name, fsdp in (("8x1x1", 1), ("2x4x1", 4), ("1x8x1", 8))[:len(meshes)]:
    assert (res["fsdp"][name]["sharded_leaves"] > 0) == (fsdp > 1), res
  assert res["rollout_tokens_differing"] == 0 and res["micro_rollout_tokens_differing"] == 0, res
  for strategy in ("pmap", "fsdp"):
    for what in ("loss", "metrics", "params"):
      assert res["grad_accum"][strategy][what] < TOL, (strategy, what, res["grad_accum"])
  assert "rl.prompts_per_step * rl.group_size=12" in res["bad_batch_error"], res
  assert "8 batch shards" in res["bad_batch_error"], res


def test_fsdp_spec_shards_the_largest_divisible_dimension():
  P = jax.sharding.PartitionSpec
  assert fsdp_spec((4, 128, 384), 8) == P(None, None, "fsdp")
  assert fsdp_spec((260, 128), 8) == P(None, "fsdp")  # 260 is not a multiple of 8
  assert fsdp_spec((64, 64), 4) == P("fsdp", None)  # ties: the earlier dimension
  assert fsdp_spec((3, 5), 2) == P()
  assert fsdp_spec((), 8) == P()
  assert fsdp_spec((128, 256), 1) == P()


def test_mesh_shape_and_errors():
  assert mesh_shape(ParallelConfig(), 8) == (8, 1, 1)
  assert mesh_shape(ParallelConfig(fsdp=4), 8) == (2, 4, 1)
  assert mesh_shape(ParallelConfig(data=1, fsdp=8), 8) == (1, 8, 1)
  for bad in (ParallelConfig(data=3, fsdp=2), ParallelConfig(fsdp=3), ParallelConfig(data=4, fsdp=4)):
    with pytest.raises(ConfigError, match=r"parallel\.\(data, fsdp, tensor\).*8 devices available"):
      mesh_shape(bad, 8)
  with pytest.raises(ConfigError, match="parallel.tensor=2"):
    mesh_shape(ParallelConfig(tensor=2), 8)
  with pytest.raises(ConfigError, match="parallel.strategy='ddp'"):
    ParallelConfig(strategy="ddp").validate()


def test_make_mesh_axes_and_device_count_error():
  mesh = make_mesh(ParallelConfig())
  assert mesh.axis_names == ("data", "fsdp", "tensor")
  assert dict(mesh.shape) == {"data": jax.device_count(), "fsdp": 1, "tensor": 1}
  assert set(mesh.axis_types) == {jax.sharding.AxisType.Auto}
  with pytest.raises(ConfigError, match=f"{jax.device_count()} devices available"):
    make_mesh(ParallelConfig(data=jax.device_count() + 1))


def _toy_logits_fn(params, tokens):
  """Bidirectional toy model: each position sees its own embedding and the sequence mean."""
  h = params["emb"][tokens]
  return jnp.tanh(h + jnp.mean(h, axis=1, keepdims=True)) @ params["out"]


def test_per_sequence_keys_matches_a_loop_over_rows():
  """Oracle: row r scored alone with key fold_in(key, offset + r), for an estimator whose draws use
  the key (prompt masking, commit-order jitter) and a per-row keyword argument (commit_step)."""
  from daca_jax.likelihood import LIKELIHOOD

  est = LIKELIHOOD.get("stratified")
  rng = np.random.default_rng(0)
  v, d, b, p, length = 11, 8, 5, 3, 6
  params = {"emb": jnp.asarray(rng.normal(size=(v, d)), jnp.float32),
            "out": jnp.asarray(rng.normal(size=(d, v)), jnp.float32)}
  tokens = jnp.asarray(rng.integers(0, v - 1, size=(b, p + length)), jnp.int32)
  commit = jnp.asarray(rng.integers(0, 3, size=(b, length)), jnp.int32)
  cfg = LikelihoodConfig(stratified=StratifiedConfig(num_strata=3, partition="commit_order"), p_mask_prompt=0.5)
  key = jax.random.PRNGKey(5)
  call = lambda fn: jax.jit(lambda tok, k, cs: fn(_toy_logits_fn, params, tok, p, k, cfg, mask_id=v - 1,
                                                  commit_step=cs))
  got = call(per_sequence_keys(est, 10))(tokens, key, commit).logp
  one = lambda *a: call(est)(*a).logp
  want = np.stack([one(tokens[r:r + 1], jax.random.fold_in(key, 10 + r), commit[r:r + 1])[0]
                   for r in range(b)])
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)
  plain = one(tokens, key, commit)
  assert not np.allclose(np.asarray(plain), want)  # the keys really are per row


def test_pmap_estimator_forwards_keywords_and_tree_outputs():
  """rldf takes commit_conf / completion_mask and returns a TokenScores tree: the pmap wrapper keeps
  its signature (the learner reads it) and, on a 1-device mesh, equals per-sequence keys."""
  import inspect

  from daca_jax.likelihood import LIKELIHOOD
  from daca_jax.parallel import wrap_likelihood

  rldf = LIKELIHOOD.get("rldf")
  wrapped = wrap_likelihood(rldf, ParallelConfig(strategy="pmap"))
  assert inspect.signature(wrapped).parameters == inspect.signature(rldf).parameters
  rng = np.random.default_rng(1)
  v, d, b, p, length = 11, 8, 4, 3, 6
  params = {"emb": jnp.asarray(rng.normal(size=(v, d)), jnp.float32),
            "out": jnp.asarray(rng.normal(size=(d, v)), jnp.float32)}
  tokens = jnp.asarray(rng.integers(0, v - 1, size=(b, p + length)), jnp.int32)
  kw = dict(commit_step=jnp.asarray(rng.integers(0, 3, size=(b, length)), jnp.int32),
            commit_conf=jnp.asarray(rng.uniform(size=(b, length)), jnp.float32),
            completion_mask=jnp.ones((b, length), jnp.float32))
  cfg = LikelihoodConfig(rldf=RLDFConfig(states=2), trajectory_steps=3)
  key = jax.random.PRNGKey(2)
  mesh = make_mesh(ParallelConfig(), devices=jax.devices()[:1])
  call = lambda fn: fn(_toy_logits_fn, params, tokens, p, key, cfg, mask_id=v - 1, **kw)
  got = jax.jit(jax.shard_map(lambda: call(wrapped), mesh=mesh, in_specs=(),
                              out_specs=jax.sharding.PartitionSpec(), check_vma=False))()
  want = jax.jit(lambda: call(per_sequence_keys(rldf)))()
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-6)


def test_process_slice():
  assert [process_slice(12, i, 3) for i in range(3)] == [slice(0, 4), slice(4, 8), slice(8, 12)]
  assert process_slice(5) == slice(0, 5)
  with pytest.raises(ConfigError, match="rl.prompts_per_step=10.*4 processes"):
    process_slice(10, 0, 4)


def test_single_process_needs_no_initialize(monkeypatch):
  monkeypatch.delenv("JAX_COORDINATOR_ADDRESS", raising=False)
  assert maybe_initialize(ParallelConfig()) is False
  mesh = make_mesh(ParallelConfig())
  x = np.arange(2 * jax.device_count() * 3, dtype=np.float32).reshape(-1, 3)
  g = global_batch({"x": x}, mesh)["x"]
  np.testing.assert_array_equal(np.asarray(g), x)
  assert g.sharding.spec == jax.sharding.PartitionSpec(("data", "fsdp"))


def _distributed_child() -> None:
  """One of 2 processes x 2 CPU devices: a global batch from per-process prompt slices."""
  jax.config.update("jax_cpu_collectives_implementation", "gloo")  # cross-process CPU collectives
  assert maybe_initialize(ParallelConfig())
  mesh = make_mesh(ParallelConfig(fsdp=2))
  full = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
  g = global_batch(full[process_slice(8)], mesh)
  total = jax.jit(lambda x: jnp.sum(x * jnp.arange(8.0)[:, None]),
                  out_shardings=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))(g)
  print(json.dumps({"process": jax.process_index(), "devices": jax.device_count(), "shape": list(g.shape),
                    "mesh": list(mesh.shape.values()), "total": float(total),
                    "want": float(np.sum(full * np.arange(8.0)[:, None]))}))


def test_two_processes_build_one_global_batch():
  port = _free_port()
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu",
             JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES="2")
  procs = [subprocess.Popen([sys.executable, __file__, "--distributed"], env=dict(env, JAX_PROCESS_ID=str(i)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
  outs = [p.communicate(timeout=180) for p in procs]
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  res = sorted((json.loads(out.strip().splitlines()[-1]) for out, _ in outs), key=lambda r: r["process"])
  assert [r["process"] for r in res] == [0, 1]
  for r in res:
    assert r["devices"] == 4 and r["mesh"] == [2, 2, 1] and r["shape"] == [8, 3]
    assert r["total"] == r["want"]


def _free_port() -> int:
  import socket

  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


@pytest.mark.slow  # 1 min; test_two_processes_build_one_global_batch covers the multi-process batch
@pytest.mark.parametrize("source", ["local", "tfds"])
def test_two_process_main_job_equals_one_process(tmp_path, source):
  """The whole main job (SFT, evaluation, RL with DTCA's host-side tagging, checkpoints) over 2
  processes x 2 CPU devices equals the same job in one process with 4 devices: the same mesh, each
  process feeding and grading its own share. Process 0 alone writes the files. With ``tfds`` the two
  processes read the benchmark files as TFDS datasets and the one process reads the files themselves."""
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  flags = ["--config=configs/sudoku_tiny.py:smoke", "--progress=false", "--config.parallel.strategy=pmap",
           "--config.rl.credit=dtca", "--config.rl.steps=2", "--config.sft.steps=10",
           "--config.task.num_eval_examples=8", "--config.eval.batch_size=8"]
  cmd = [sys.executable, os.path.join(repo, "experiments", "train.py")] + flags
  two_flags = []
  if source == "tfds":
    pytest.importorskip("tensorflow_datasets")
    from daca_jax.data import tfds_builders
    from tests.tiny_data import shared_data
    if shared_data() is None:
      pytest.skip("../shared/data is absent")
    tfds_builders.build(["daca_sudoku4x4_d1"], tmp_path / "tfds", str(shared_data()), log=lambda _: None)
    two_flags = ["--config.data.source=tfds", f"--config.data.tfds_dir={tmp_path / 'tfds'}"]
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  port = _free_port()
  multi_env = dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=2",
                   JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES="2")
  procs = [subprocess.Popen(cmd + [f"--workdir={tmp_path / 'one'}"], cwd=repo, text=True,
                            env=dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=4"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)]
  procs += [subprocess.Popen(cmd + two_flags + [f"--workdir={tmp_path / 'two'}"], cwd=repo, text=True,
                             env=dict(multi_env, JAX_PROCESS_ID=str(i)), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE) for i in range(2)]
  outs = [p.communicate(timeout=420) for p in procs]
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  assert "Results written" in outs[1][0] and "Results written" not in outs[2][0]  # process 1 is quiet
  read = lambda run, name: [json.loads(l) for l in (tmp_path / run / name).read_text().splitlines()]
  one, two = read("one", "metrics.jsonl"), read("two", "metrics.jsonl")
  assert [r["step"] for r in two] == [1, 2]  # one writer: no duplicate lines
  for a, b in zip(one, two):
    assert a["reward_mean"] == b["reward_mean"]
    for k in ("loss", "kl", "grad_norm"):
      assert b[k] == pytest.approx(a[k], rel=1e-5, abs=1e-7), k
    assert b["weight_std"] == pytest.approx(a["weight_std"], rel=1e-4)  # z-scores of near-ties
  res = {r: json.loads((tmp_path / r / "results.json").read_text()) for r in ("one", "two")}
  assert res["one"]["eval_before"] == res["two"]["eval_before"]
  assert res["one"]["eval_after"] == res["two"]["eval_after"]
  for a, b in zip(read("one", "sft_metrics.jsonl"), read("two", "sft_metrics.jsonl"), strict=True):
    assert b == pytest.approx(a, rel=1e-5, abs=1e-7)



def test_two_process_job_rejects_unsplittable_batches_up_front(tmp_path):
  """3 prompts per step over 2 processes: every process stops with the field named, before SFT."""
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  cmd = [sys.executable, os.path.join(repo, "experiments", "train.py"), "--config=configs/sudoku_tiny.py:smoke",
         "--progress=false", "--config.parallel.strategy=pmap", "--config.rl.prompts_per_step=3",
         f"--workdir={tmp_path / 'run'}"]
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2",
             JAX_COORDINATOR_ADDRESS=f"localhost:{_free_port()}", JAX_NUM_PROCESSES="2")
  procs = [subprocess.Popen(cmd, cwd=repo, text=True, env=dict(env, JAX_PROCESS_ID=str(i)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(2)]
  outs = [p.communicate(timeout=180) for p in procs]
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 2 and "rl.prompts_per_step=3" in err and "2 processes" in err, err[-2000:]
  assert not (tmp_path / "run" / "sft").exists()


def _pass_accum_child() -> dict:
  """Runs with 2 devices: BGPO's update with ``rl.pass_accum`` under pmap (whole batch, and micro-batches)
  against the one-device update of the one-shot estimator with per-row keys (the masks pmap draws)."""
  import dataclasses

  from daca_jax.likelihood import LIKELIHOOD
  from daca_jax.rl.learner import GRPOLearner
  from daca_jax.rl.update import make_update
  from daca_jax.likelihood.elbo_mc import ELBOMCConfig

  cfg, logits_fn, params, prompts = _setup()
  cfg = dataclasses.replace(
      cfg, likelihood=dataclasses.replace(cfg.likelihood, elbo_mc=ELBOMCConfig(samples=3)),
      rl=dataclasses.replace(cfg.rl, objective="bgpo", credit="uniform", likelihood="elbo_mc", num_iterations=2))
  one = GRPOLearner(logits_fn, cfg, mask_id=cfg.model.mask_token_id, eos_id=258)
  traj = one.rollout(params, prompts, jax.random.PRNGKey(3))
  rewards = jnp.asarray(np.random.default_rng(1).choice([0.0, 0.5, 1.0], size=prompts.shape[0]), jnp.float32)
  batch = (traj, rewards, one.credit_weights(traj), params)
  opt0 = one.init_opt_state(params)
  seq = make_update(logits_fn, cfg, one.optimizer, mask_id=cfg.model.mask_token_id,
                    estimator=per_sequence_keys(LIKELIHOOD.get("elbo_mc")))
  ref_m, ref_p = _run(jax.jit(seq), params, opt0, batch, steps=1)
  out = {"params_moved": _max_diff(ref_p, params)}
  for grad_accum in (1, 2):
    rl = dataclasses.replace(cfg.rl, pass_accum=True, grad_accum=grad_accum)
    learner = GRPOLearner(logits_fn, dataclasses.replace(cfg, rl=rl, parallel=ParallelConfig(strategy="pmap")),
                          mask_id=cfg.model.mask_token_id, eos_id=258)
    metrics, got = _run(learner.update, params, opt0, batch, steps=1)
    out[f"accum{grad_accum}"] = {"loss": abs(metrics[0]["loss"] - ref_m[0]["loss"]), "params": _max_diff(got, ref_p)}
  return out


def test_pass_accumulation_under_pmap_equals_the_one_device_update():
  """rl.pass_accum under parallel.strategy="pmap" (2 devices; alone and inside rl.grad_accum = 2): each
  device scores its rows of every pass with per-row keys, so μ = 2 BGPO updates equal the one-device
  updates of the one-shot estimator under per-row keys."""
  env = dict(os.environ, XLA_FLAGS=XLA_FLAGS.replace("count=8", "count=2"), JAX_PLATFORMS="cpu")
  proc = _run_child([sys.executable, __file__, "--pass-accum"], env, timeout=300)
  assert proc.returncode == 0, proc.stderr[-4000:]
  res = json.loads(proc.stdout.strip().splitlines()[-1])
  assert res["params_moved"] > 1e-5, res
  for name in ("accum1", "accum2"):
    assert res[name]["loss"] < TOL and res[name]["params"] < TOL, res


if __name__ == "__main__":
  if sys.argv[1:2] == ["--child"]:
    print(json.dumps(child(SLOW_MESHES if sys.argv[2:] == ["--all-meshes"] else MESHES)))
  elif sys.argv[1:] == ["--pass-accum"]:
    print(json.dumps(_pass_accum_child()))
  elif sys.argv[1:] == ["--distributed"]:
    _distributed_child()
