"""LLaDA-architecture transformer: shapes, bidirectionality, GQA, remat, the 8B config's size."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.errors import ConfigError
from daca_jax.models import count_params, init_model, llada_8b_config, make_logits_fn, tiny_config

SMALL = tiny_config(d_model=32, n_layers=2, n_heads=4, mlp_dim=64, vocab_size=40, mask_token_id=39)


def test_logits_shape_and_bidirectional_attention():
  gd, params = init_model(SMALL, seed=0)
  f = jax.jit(make_logits_fn(gd))
  x = jnp.asarray(np.random.default_rng(0).integers(0, 39, (2, 10)), jnp.int32)
  out = f(params, x)
  assert out.shape == (2, 10, 40) and out.dtype == jnp.float32
  x2 = x.at[:, -1].set((x[:, -1] + 1) % 39)
  changed = np.abs(np.asarray(f(params, x2) - out)).max(-1)
  assert (changed[:, 0] > 0).all(), "position 0 must see the last token (no causal mask)"


def test_param_count_matches_formula():
  gd, params = init_model(SMALL)
  d, f, v, n = 32, 64, 40, 2
  per_layer = 4 * d * d + 3 * d * f + 2 * d
  assert count_params(params) == v * d + n * per_layer + d + d * v


def test_gqa_and_tied_embeddings():
  cfg = dataclasses.replace(SMALL, n_kv_heads=2, tie_embeddings=True)
  gd, params = init_model(cfg)
  out = make_logits_fn(gd)(params, jnp.zeros((1, 5), jnp.int32))
  assert out.shape == (1, 5, 40)
  assert params["layers"]["k_proj"]["kernel"].shape == (2, 32, 16)
  assert "lm_head" not in params


@pytest.mark.parametrize("remat", ["full", "dots"])
def test_remat_does_not_change_values_or_grads(remat):
  x = jnp.asarray(np.random.default_rng(1).integers(0, 39, (2, 6)), jnp.int32)
  outs = []
  for r in ("none", remat):
    gd, params = init_model(dataclasses.replace(SMALL, remat=r), seed=3)
    f = make_logits_fn(gd)
    outs.append(jax.value_and_grad(lambda p: jnp.sum(f(p, x) ** 2))(params))
  np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-6)
  for a, b in zip(jax.tree.leaves(outs[0][1]), jax.tree.leaves(outs[1][1])):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_llada_8b_builds_abstractly_with_its_parameter_count():
  abstract = jax.eval_shape(lambda: init_model(llada_8b_config())[1])
  n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(abstract))
  d, f, v, layers = 4096, 12288, 126464, 32
  assert n == v * d + layers * (4 * d * d + 3 * d * f + 2 * d) + d + d * v
  assert 8.0e9 < n < 8.03e9  # LLaDA-8B: 8.02 B parameters


def test_bad_model_config():
  with pytest.raises(ConfigError, match=r"model\.n_kv_heads=3"):
    init_model(dataclasses.replace(SMALL, n_kv_heads=3))


def test_unrolled_layer_stack_equals_scanned():
  """``model.unroll_layers`` changes how the stack compiles, not what it computes."""
  cfg = tiny_config(n_layers=3)
  gd, params = init_model(cfg, seed=0)
  gd_u, _ = init_model(dataclasses.replace(cfg, unroll_layers=True), seed=0)
  x = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size - 1, (2, 9)), jnp.int32)
  np.testing.assert_allclose(np.asarray(make_logits_fn(gd_u)(params, x)),
                             np.asarray(make_logits_fn(gd)(params, x)), rtol=1e-5, atol=1e-5)
