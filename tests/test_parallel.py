"""Mesh, shardings and the pmap / fsdp updates (DESIGN §10).

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
from daca_jax.parallel import fsdp_spec, mesh_shape, per_sequence_keys, process_slice
from daca_jax.types import ParallelConfig

MESHES = ((8, 1, 1), (2, 4, 1), (1, 8, 1))
TOL = 1e-5
# 8 simulated devices; the cheaper CPU code generation halves the child's compile time (the same
# flags apply to the one-device references, which run in the same process).
XLA_FLAGS = ("--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0 "
             "--xla_llvm_disable_expensive_passes=true")


def _setup():
  """Tiny model and the real method: diffu_grpo, DPS weights, stratified likelihood (K = 4)."""
  from daca_jax.models.llada import init_model, make_logits_fn
  from daca_jax.types import LikelihoodConfig, RLConfig, RolloutConfig, TrainConfig, tiny_config

  cfg = TrainConfig(model=tiny_config(), rollout=RolloutConfig(gen_length=16, block_length=8, steps=8),
                    likelihood=LikelihoodConfig(num_strata=4),
                    rl=RLConfig(objective="diffu_grpo", credit="dps", likelihood="stratified",
                                prompts_per_step=4, group_size=4, num_iterations=1, beta=0.04,
                                learning_rate=1e-4, warmup_steps=0))
  graphdef, params = init_model(cfg.model, seed=0)
  rng = np.random.default_rng(0)
  prompts = np.repeat(rng.integers(0, 256, size=(cfg.rl.prompts_per_step, 8)), cfg.rl.group_size, axis=0)
  return cfg, make_logits_fn(graphdef), params, jnp.asarray(prompts, jnp.int32)


def _run(update, params, opt_state, batch, steps: int = 3):
  """``steps`` updates on one rollout batch (new key each); (metrics per update, final params)."""
  traj, rewards, weights, ref = batch
  metrics = []
  for t in range(steps):
    params, opt_state, m = update(params, opt_state, ref, traj, rewards, weights,
                                  jax.random.fold_in(jax.random.PRNGKey(7), t))
    metrics.append({k: float(v) for k, v in m.items()})
  return metrics, jax.device_get(params)


def _max_diff(a, b) -> float:
  return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in
             zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def child() -> dict:
  """Runs in the 8-device process: one-device references vs pmap / fsdp learners on every mesh."""
  import dataclasses

  from daca_jax.rl import GRPOLearner

  assert jax.device_count() == 8, jax.devices()
  cfg, logits_fn, params, prompts = _setup()
  make = lambda pcfg: GRPOLearner(logits_fn, dataclasses.replace(cfg, parallel=pcfg),
                                  mask_id=cfg.model.mask_token_id, eos_id=258)
  one = make(ParallelConfig())
  key = jax.random.PRNGKey(3)
  traj = one.rollout(params, prompts, key)
  rewards = jnp.asarray(np.random.default_rng(1).choice([0.0, 0.5, 1.0], size=prompts.shape[0]), jnp.float32)
  batch = (traj, rewards, one.credit_weights(traj), params)  # reference policy = initial params
  opt0 = one.init_opt_state(params)
  # References on one device: the plain learner (fsdp must match it), and the same update with
  # per-sequence likelihood keys (the masks pmap draws, whatever the device count).
  refs = {"fsdp": _run(one.update, params, opt0, batch)}
  seq = make(ParallelConfig())  # a new learner: jax.jit caches traces per bound method
  seq.likelihood = per_sequence_keys(seq.likelihood)
  refs["pmap"] = _run(jax.jit(seq._update), params, opt0, batch)
  out = {"params_moved": _max_diff(refs["fsdp"][1], params), "grad_norm": refs["fsdp"][0][0]["grad_norm"],
         "pmap": {}, "fsdp": {}}
  for shape in MESHES:
    for strategy in ("fsdp", "pmap"):
      learner = make(ParallelConfig(strategy=strategy, data=shape[0], fsdp=shape[1], tensor=shape[2]))
      metrics, got = _run(learner.update, params, opt0, batch)
      ref_m, ref_p = refs[strategy]
      out[strategy]["x".join(map(str, shape))] = {
          "loss": max(abs(m["loss"] - r["loss"]) for m, r in zip(metrics, ref_m)),
          "metrics": max(abs(m[k] - r[k]) for m, r in zip(metrics, ref_m) for k in r),
          "params": _max_diff(got, ref_p)}
  # The rollout split over 2 x 4 devices with FSDP-sharded parameters samples the same tokens.
  sharded = make(ParallelConfig(strategy="fsdp", data=2, fsdp=4)).rollout
  out["rollout_tokens_differing"] = int(np.sum(np.asarray(sharded(params, prompts, key).tokens)
                                               != np.asarray(traj.tokens)))
  try:  # 12 rows do not split over 8 devices: a ConfigError before anything is compiled
    learner.update(params, opt0, params, traj, rewards[:12], batch[2][:12], key)
    out["bad_batch_error"] = ""
  except ConfigError as e:
    out["bad_batch_error"] = str(e)
  return out


def test_pmap_and_fsdp_match_one_device_on_8_devices():
  env = dict(os.environ, XLA_FLAGS=XLA_FLAGS, JAX_PLATFORMS="cpu")
  t0 = time.time()
  proc = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-4000:]
  res = json.loads(proc.stdout.strip().splitlines()[-1])
  print(json.dumps(res, indent=1), f"{time.time() - t0:.1f} s")
  assert res["params_moved"] > 1e-4 and res["grad_norm"] > 1e-3  # the updates did something
  for name in ("x".join(map(str, s)) for s in MESHES):
    for strategy in ("pmap", "fsdp"):
      for what in ("loss", "metrics", "params"):
        assert res[strategy][name][what] < TOL, (strategy, name, what, res)
  assert res["rollout_tokens_differing"] == 0, res
  assert "rl.prompts_per_step * rl.group_size=12" in res["bad_batch_error"], res
  assert "8 batch shards" in res["bad_batch_error"], res


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
  print(json.dumps(child()))
