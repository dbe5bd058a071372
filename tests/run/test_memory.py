"""Memory items: chunked target log-prob gather (== unchunked, values and gradients, smaller compiled
scratch), bf16 compute with fp32 parameters, and remat policies with identical gradients."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.likelihood.common import (chunked_token_logprobs, make_target_logprob_fn,
                                        token_logprobs)
from daca_jax.models import init_model, make_head_fn, make_hidden_fn, make_logits_fn, tiny_config

CFG = tiny_config(d_model=32, n_layers=2, n_heads=4, mlp_dim=64, vocab_size=50, mask_token_id=49)
RNG = np.random.default_rng(0)
TOK = jnp.asarray(RNG.integers(0, 49, (3, 13)), jnp.int32)
TGT = jnp.asarray(RNG.integers(0, 50, (3, 10)), jnp.int32)


def test_chunked_equals_unchunked_values_and_grads():
  gd, params = init_model(CFG, seed=0)
  logits_fn = make_logits_fn(gd)
  w = jnp.asarray(RNG.normal(size=(3, 10)), jnp.float32)
  full = lambda p: token_logprobs(logits_fn(p, TOK)[:, 3:], TGT)
  a, ga = jax.jit(jax.value_and_grad(lambda p: jnp.sum(w * full(p))))(params)
  for chunk in (1, 4):  # 4 does not divide the 10 target positions: the last chunk is padded
    chunked = make_target_logprob_fn(make_hidden_fn(gd), make_head_fn(gd), chunk)
    part = lambda p: chunked(p, TOK, TGT, start=3)
    lp = jax.jit(part)(params)
    assert lp.shape == (3, 10) and lp.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(lp), np.asarray(jax.jit(full)(params)), atol=1e-6, rtol=1e-6)
    b, gb = jax.jit(jax.value_and_grad(lambda p: jnp.sum(w * part(p))))(params)
    np.testing.assert_allclose(float(b), float(a), rtol=1e-6)
    for x, y in zip(jax.tree.leaves(ga), jax.tree.leaves(gb)):
      np.testing.assert_allclose(np.asarray(y), np.asarray(x), atol=1e-6, rtol=1e-5)


def _scratch_bytes(fn, *args):
  return jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes


def test_chunked_gather_never_holds_all_logits():
  """Compiled scratch of value_and_grad of the gather at V = 32k: the unchunked form holds float32
  [B, T, V] logits (and their gradient); the chunked form stays well below one such array."""
  b, t, d, v = 2, 256, 64, 32768
  h = jnp.zeros((b, t, d), jnp.float32)
  w = jnp.zeros((d, v), jnp.float32)
  y = jnp.zeros((b, t), jnp.int32)
  loss = lambda chunk: lambda w, h: jnp.sum(chunked_token_logprobs(lambda x: x @ w, h, y, chunk))
  full = _scratch_bytes(jax.value_and_grad(loss(0)), w, h)
  chunked = _scratch_bytes(jax.value_and_grad(loss(32)), w, h)
  logits_bytes = b * t * v * 4
  assert full >= logits_bytes
  assert chunked < logits_bytes / 2, (chunked, full)


def test_bf16_compute_fp32_params_close_to_fp32():
  gd32, p32 = init_model(CFG, seed=2)
  gd16, p16 = init_model(dataclasses.replace(CFG, dtype="bfloat16"), seed=2)
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(p16))  # params stay float32
  a = jax.jit(make_logits_fn(gd32))(p32, TOK)
  logits, hidden = jax.jit(make_logits_fn(gd16, return_hidden=True))(p16, TOK)
  assert logits.dtype == jnp.float32 and hidden.dtype == jnp.bfloat16
  err = float(jnp.abs(logits - a).max())
  assert 0 < err < 0.05 * float(jnp.abs(a).max()) + 1e-2, err
  pa, pb = jax.nn.softmax(a), jax.nn.softmax(logits)
  assert float(jnp.abs(pa - pb).max()) < 1e-2


def test_remat_policies_give_identical_gradients():
  grads = {}
  for remat in ("none", "full", "dots", "dots_saveable"):
    gd, params = init_model(dataclasses.replace(CFG, remat=remat), seed=3)
    f = make_logits_fn(gd)
    grads[remat] = jax.jit(jax.grad(lambda p: jnp.sum(token_logprobs(f(p, TOK)[:, 3:], TGT))))(params)
  for remat in ("full", "dots", "dots_saveable"):
    for x, y in zip(jax.tree.leaves(grads["none"]), jax.tree.leaves(grads[remat])):
      np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=1e-6, atol=1e-7)
