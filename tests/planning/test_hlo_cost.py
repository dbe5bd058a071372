"""daca_jax.planning.hlo_cost: XLA's cost of a compiled program with every loop counted, checked against
XLA's own count of the same program written without loops (exact oracle: the same analysis)."""
import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from daca_jax.models import init_model, make_logits_fn
from daca_jax.planning import hlo_cost
from daca_jax.config.model import tiny_config

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _plain_flops(compiled):
  return hlo_cost._plain(compiled)["flops"]


def test_nested_loops_and_a_conditional_count_like_the_unrolled_program():
  w = jax.ShapeDtypeStruct((3, 32, 32), jnp.float32)
  x = jax.ShapeDtypeStruct((16, 32), jnp.float32)

  def looped(x, w):
    inner = lambda c, wi: (jnp.tanh(c @ wi), None)
    outer = lambda c, _: (jax.lax.scan(inner, c, w)[0], None)
    y = jax.lax.scan(outer, x, None, length=5)[0]
    return jax.lax.cond(y.sum() > 0, lambda: y * 2.0, lambda: jax.lax.scan(inner, y, w)[0])

  def unrolled(x, w):
    for _ in range(5):
      for i in range(3):
        x = jnp.tanh(x @ w[i])
    y = x
    for i in range(3):  # the costlier branch, as XLA counts a conditional
      y = jnp.tanh(y @ w[i])
    return y

  cost = hlo_cost.program_cost(jax.jit(looped).lower(x, w).compile())
  want = _plain_flops(jax.jit(unrolled).lower(x, w).compile())
  assert cost.exact_loops and cost.unknown_trip_loops == 0
  assert sorted(t for t, _ in cost.loops) == [3, 3, 5]
  assert cost.xla_flops_once < want / 4  # what XLA's plain count says: each body once
  assert cost.flops == pytest.approx(want, rel=2e-3)
  assert cost.transcendentals == pytest.approx(18 * 16 * 32, rel=1e-6)  # 18 tanh layers of [16, 32]


@pytest.mark.parametrize("remat", ["none", "full"])
def test_scanned_layer_stack_counts_like_unroll_layers(remat):
  # The model's own switch (model.unroll_layers) gives XLA a program without the layer loop: the
  # forward pass and its gradient (with the remat recomputation) must count the same.
  toks = jnp.zeros((2, 16), jnp.int32)
  counts = {}
  for unroll in (False, True):
    graphdef, params = init_model(tiny_config(n_layers=3, unroll_layers=unroll, remat=remat), 0)
    fn = make_logits_fn(graphdef)
    grad = jax.jit(jax.grad(lambda p, t: fn(p, t).sum()))
    counts[unroll] = [hlo_cost.program_cost(f.lower(params, toks).compile())
                      for f in (jax.jit(fn), grad)]
  for scanned, unrolled in zip(counts[False], counts[True]):
    assert not unrolled.loops and scanned.loops
    assert scanned.flops == pytest.approx(unrolled.flops, rel=1e-3)
  # (transcendentals are not compared: XLA's fusion may duplicate an exp into several consumers in one
  # program and not the other)


_COLLECTIVES = """
import json, jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
from daca_jax.planning.hlo_cost import program_cost
mesh = jax.make_mesh((2,), ("fsdp",))
def f(x, w):  # w sharded over its input axis: every layer of every step gathers it
  inner = lambda c, wi: (jnp.tanh(c @ wi), None)
  return jax.lax.scan(lambda c, _: (jax.lax.scan(inner, c, w)[0], None), x, None, length=7)[0]
x = jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=NamedSharding(mesh, P("fsdp")))
w = jax.ShapeDtypeStruct((5, 64, 64), jnp.float32, sharding=NamedSharding(mesh, P(None, "fsdp")))
print(json.dumps(program_cost(jax.jit(f).lower(x, w).compile(), 2).collective_bytes))
"""


def test_collective_bytes_are_weighted_by_how_often_they_run():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu",
             PYTHONPATH=str(ROOT))
  r = subprocess.run([sys.executable, "-c", _COLLECTIVES], capture_output=True, text=True, env=env, cwd=ROOT,
                     timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  got = json.loads(r.stdout.strip().splitlines()[-1])
  # XLA gathers each layer's weight where it is used (as the FSDP model's layer scan does): 7 steps x 5
  # layers, each receiving the other device's half of a 64 x 64 float32 kernel.
  assert got["all-gather"] == 7 * 5 * 64 * 64 * 4 / 2
