"""What a compiled FSDP program's collectives move, against ZeRO-3's floor (daca_jax/planning/traffic.py).

The sharding test compiles the real learner's rollout and update for 8 simulated devices in a child
process (the device count is fixed before JAX starts) and prints the plan record's traffic as JSON: a
regression of the activations' sharding (the compiler partitioning matrix products over the FSDP axis
and all-reducing activations, as it did inside the per-row ``vmap`` of ``rl.grad_accum``) or of the
rollout's weight gathering moves the program off the floor and fails here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from daca_jax.planning import traffic
from daca_jax.planning.hlo_cost import Collective, collectives
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.stratified import StratifiedConfig
from daca_jax.config.parallel import ParallelConfig
from daca_jax.config.train import TrainConfig
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.model import tiny_config

XLA_FLAGS = ("--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0 "
             "--xla_llvm_disable_expensive_passes=true")


def _config(rollout_weights: str = "auto", num_iterations: int = 1) -> TrainConfig:
  """A float32 model (no upcast) and the update path that once lost the batch layout: SML (K = 4 passes
  vmapped) over micro-batches scored row by row (``rl.grad_accum = 2``) and a KL term."""
  return TrainConfig(model=tiny_config(d_model=256, n_heads=4, mlp_dim=512, n_layers=2, remat="full"),
                     rollout=RolloutConfig(gen_length=16, block_length=8, steps=8),
                     likelihood=LikelihoodConfig(stratified=StratifiedConfig(num_strata=4)),
                     rl=RLConfig(objective="diffu_grpo", credit="dps", likelihood="stratified", prompts_per_step=8,
                                 group_size=2, num_iterations=num_iterations, beta=0.04, grad_accum=2, warmup_steps=0),
                     parallel=ParallelConfig(strategy="fsdp", data=1, fsdp=8, rollout_weights=rollout_weights))


def child() -> None:
  from daca_jax.planning.compiled import build, compile_rollout
  from daca_jax.planning.plan import plan_from_config

  record = plan_from_config(_config("gathered"), prompt_len=8, num_devices=8)
  out = {"gathered": {k: record[k] for k in ("traffic_per_device", "collective_floor", "setting")}}
  # the other rollout alone (the update does not depend on it)
  cfg = _config("sharded")
  built = build(cfg, 8)
  program = compile_rollout(built)[0]
  out["sharded"] = {"traffic_per_device": {"rollout": program.traffic},
                    "collective_floor": traffic.collective_floor(cfg, devices=8, rollout_calls=1),
                    "setting": {"rollout_weights": cfg.parallel.rollout_weights, "steps": cfg.rollout.steps}}
  print(json.dumps(out))


@pytest.fixture(scope="module")
def compiled():
  env = dict(os.environ, XLA_FLAGS=XLA_FLAGS, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_fsdp_update_collectives_are_within_2x_of_the_zero3_floor(compiled):
  rec = compiled["gathered"]
  t, floor = rec["traffic_per_device"]["update"], rec["collective_floor"]["update"]
  total = sum(t["by_op"].values())
  assert t["weights_upcast"] == 0.0  # float32 parameters: nothing to discount
  assert floor["total"] > 0 and total <= 2 * floor["total"], (total, floor)
  # what moves is weights and gradients; activations were all-reduced at many times the floor before
  assert t["by_what"]["activations"] < 0.25 * floor["total"], t["by_what"]
  assert t["by_what"]["weights"] > 0.3 * floor["weights"], (t["by_what"], floor)


def test_rollout_gathers_the_weights_once_per_call_or_per_model_call(compiled):
  once, per_step = compiled["gathered"], compiled["sharded"]
  assert once["setting"]["rollout_weights"] == "gathered" and per_step["setting"]["rollout_weights"] == "sharded"
  f_once, f_step = once["collective_floor"]["rollout"], per_step["collective_floor"]["rollout"]
  steps = once["setting"]["steps"]
  assert f_step["weight_gathers"] == steps * f_once["weight_gathers"]
  w_once = once["traffic_per_device"]["rollout"]["by_what"]["weights"]
  w_step = per_step["traffic_per_device"]["rollout"]["by_what"]["weights"]
  assert 0.5 * f_once["weights"] <= w_once <= 2 * f_once["weights"], (w_once, f_once)
  # per model call: several times the once-per-call gather (XLA may hoist a loop-invariant gather of
  # a small leaf out of the step loop, so not all S of them), never above the floor's S gathers x 2
  assert 2 * w_once <= w_step <= 2 * f_step["weights"], (w_step, w_once, f_step)
  assert sum(once["traffic_per_device"]["rollout"]["by_op"].values()) <= 2 * f_once["total"]


def test_floor_counts_passes_and_micro_batches():
  cfg = _config("gathered", num_iterations=2)
  passes = traffic.update_passes(cfg)
  # μ = 2 with grad_accum: θ_old at both inner updates, θ_ref at both, forward/recompute/backward at both
  assert passes == {"old": 2, "reference": 2, "forward": 2, "recompute": 2, "backward": 2}
  floor = traffic.collective_floor(cfg, devices=8, rollout_calls=3)
  model_b, train_b = traffic._model_bytes(cfg)
  assert floor["update"]["weight_gathers"] == 2 * 10
  assert floor["update"]["weights"] == pytest.approx(20 * model_b * 7 / 8)
  assert floor["update"]["gradients"] == pytest.approx(2 * 2 * train_b * 7 / 8)
  assert floor["rollout"]["weight_gathers"] == 3
  assert traffic.collective_floor(_config("sharded", 2), devices=8, rollout_calls=3)["rollout"]["weight_gathers"] == 24


def test_classify_reads_what_an_array_is_from_its_shape():
  import jax
  import jax.numpy as jnp

  params = {"layers": {"w": jnp.zeros((2, 64, 32))}, "embed": jnp.zeros((512, 64))}
  shapes = traffic.weight_shapes(params, n_layers=2, shards=8)
  assert {(64, 32), (8, 32), (64, 4), (2, 64, 32), (512, 64), (64, 64)} <= shapes
  c = lambda op, shape: Collective(op=op, dtype="f32", shape=shape, group=8, runs=1.0, sent=1.0)
  assert traffic.classify(c("all-gather", (64, 32)), shapes, 512, 8) == "weights"
  assert traffic.classify(c("reduce-scatter", (8, 32)), shapes, 512, 8) == "gradients"
  assert traffic.classify(c("all-reduce", (16, 24, 512)), shapes, 512, 8) == "logits"
  assert traffic.classify(c("all-reduce", (16, 24, 100)), shapes, 512, 8) == "activations"
  assert traffic.classify(c("all-reduce", (16,)), shapes, 512, 8) == "other"
  del jax


def test_collectives_reads_loop_trip_counts():
  # a program text with one all-gather inside a 5-step loop: 5 runs, (n-1)/n of the result per run
  text = """HloModule m, entry_computation_layout={()->f32[8]{0}}

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]{0}) parameter(0)
  %x = f32[1]{0} constant({1})
  %g = f32[8]{0} all-gather(f32[1]{0} %x), replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}
  ROOT %t = (s32[], f32[8]{0}) tuple(s32[] %i, f32[8]{0} %g)
}

%cond (p: (s32[], f32[8])) -> pred[] {
  ROOT %c = pred[] constant(true)
}

ENTRY %main () -> f32[8] {
  %init = (s32[], f32[8]{0}) tuple()
  %w = (s32[], f32[8]{0}) while((s32[], f32[8]{0}) %init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"5"}}
  ROOT %r = f32[8]{0} get-tuple-element(%w), index=1
}
"""
  (c,) = collectives(text, 8)
  assert (c.op, c.dtype, c.shape, c.group, c.runs) == ("all-gather", "f32", (8,), 8, 5.0)
  assert c.sent == pytest.approx(5 * 32 * 7 / 8)


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
  child()
