"""The gradient-agreement monitor (cosine between successive rollout batches' gradients)."""
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from daca_jax.rl.optim import grad_agreement, make_optimizer, read_grad_agreement


def _cos(a, b):
  return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_cosine_of_successive_batches_and_updates_unchanged():
  rng = np.random.default_rng(0)
  grads = [{"w": rng.normal(size=(3, 2)).astype(np.float32), "b": rng.normal(size=(2,)).astype(np.float32)}
           for _ in range(4)]
  flat = [np.concatenate([g["w"].ravel(), g["b"]]) for g in grads]
  t = grad_agreement(1)
  state = t.init(grads[0])
  for i, g in enumerate(grads):
    out, state = t.update(g, state)
    np.testing.assert_array_equal(out["w"], g["w"])  # passes gradients through
    expect = 0.0 if i == 0 else _cos(flat[i], flat[i - 1])
    assert float(state.cos) == pytest.approx(expect, abs=1e-6)


def test_only_the_first_update_of_each_batch_is_compared():
  rng = np.random.default_rng(1)
  grads = [jnp.asarray(rng.normal(size=(5,)), jnp.float32) for _ in range(6)]  # 3 batches x mu=2
  t = grad_agreement(2)
  state = t.init(grads[0])
  seen = []
  for g in grads:
    _, state = t.update(g, state)
    seen.append(float(state.cos))
  g = [np.asarray(x) for x in grads]
  np.testing.assert_allclose(seen, [0, 0, _cos(g[2], g[0]), _cos(g[2], g[0]), _cos(g[4], g[2]),
                                    _cos(g[4], g[2])], atol=1e-6)


def test_optimizer_with_and_without_the_monitor_takes_the_same_steps():
  params = {"w": jnp.ones((4,))}
  g = {"w": jnp.asarray([0.3, -0.2, 0.1, 0.5])}
  plain, _ = make_optimizer(1e-2, 0, 0.0, 1.0)
  watched, _ = make_optimizer(1e-2, 0, 0.0, 1.0, agreement_every=1)
  s1, s2 = plain.init(params), watched.init(params)
  for _ in range(3):
    u1, s1 = plain.update(g, s1, params)
    u2, s2 = watched.update(g, s2, params)
    np.testing.assert_allclose(u1["w"], u2["w"], atol=0)
  assert read_grad_agreement(s1) is None
  assert float(read_grad_agreement(s2)) == pytest.approx(1.0)
  assert float(read_grad_agreement(optax.multi_transform({"a": watched}, {"w": "a"}).init(params))) == 0.0


_FSDP_SCRIPT = r"""
import jax, jax.numpy as jnp, optax
from daca_jax import parallel
from daca_jax.rl.optim import make_optimizer
from daca_jax.config.parallel import ParallelConfig
mesh = parallel.make_mesh(ParallelConfig(strategy="fsdp", fsdp=4))
# A stacked layer weight sharded on its last dimension, as fsdp_spec shards [layers, D, F].
params = {"w": jax.ShapeDtypeStruct((2, 8, 64), jnp.bfloat16)}
opt, _ = make_optimizer(1e-3, 0, 0.0, 1.0, agreement_every=1)
state = jax.eval_shape(opt.init, params)
sh = (parallel.fsdp_shardings(params, mesh), parallel.fsdp_shardings(state, mesh))
step = jax.jit(lambda g, s, p: opt.update(g, s, p), in_shardings=(sh[0], sh[1], sh[0]))
with jax.set_mesh(mesh):
  hlo = step.lower(params, state, params).compile().as_text()
print("ALL_GATHERS", hlo.count("all-gather("))
"""


def test_fsdp_optimizer_update_gathers_nothing():
  # Elementwise AdamW, global-norm clipping and the agreement cosine need only scalar all-reduces on
  # FSDP-sharded state; a flatten (jnp.vdot) of the sharded gradient made XLA all-gather it whole.
  import os
  import pathlib
  import subprocess
  import sys

  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
  r = subprocess.run([sys.executable, "-c", _FSDP_SCRIPT], capture_output=True, text=True, env=env, timeout=300,
                     cwd=pathlib.Path(__file__).resolve().parents[2])
  assert r.returncode == 0, r.stderr[-2000:]
  assert "ALL_GATHERS 0" in r.stdout, r.stdout
