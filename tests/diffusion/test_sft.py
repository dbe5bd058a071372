"""LLaDA SFT loss vs a numpy reference; masking schedule."""
import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.diffusion import mask_completion, sft_loss, stratified_times
from tests.fixed_logit_model import jax_logits, make_params, np_logits

V, MASK, P, L, B = 12, 10, 3, 6, 8


def test_stratified_times_cover_quantiles():
  t = np.sort(np.asarray(stratified_times(jax.random.PRNGKey(0), 10, eps=0.0)))
  assert ((np.floor(t * 10)) == np.arange(10)).all()


def test_mask_completion_never_masks_prompt():
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 9, (B, P + L)), jnp.int32)
  noisy, masked = mask_completion(jax.random.PRNGKey(1), tokens, P, jnp.full((B,), 0.9), MASK)
  np.testing.assert_array_equal(noisy[:, :P], tokens[:, :P])
  np.testing.assert_array_equal(np.asarray(noisy[:, P:]) == MASK, np.asarray(masked))


def test_sft_loss_matches_numpy():
  params = jax.tree.map(jnp.asarray, make_params(P + L, V, seed=2))
  tokens = jnp.asarray(np.random.default_rng(3).integers(0, 9, (B, P + L)), jnp.int32)
  key = jax.random.PRNGKey(4)
  loss, aux = sft_loss(jax_logits, params, tokens, P, key, MASK)
  # Recreate the same t and masks from the documented key use, then compute the loss in numpy.
  k_t, k_m = jax.random.split(key)
  t = np.asarray(stratified_times(k_t, B), np.float64)
  noisy, masked = mask_completion(k_m, tokens, P, jnp.asarray(t, jnp.float32), MASK)
  logits = np_logits(params, np.asarray(noisy))[:, P:]
  logz = np.log(np.exp(logits).sum(-1))
  tgt = np.asarray(tokens)[:, P:]
  nll = logz - np.take_along_axis(logits, tgt[..., None], -1)[..., 0]
  m = np.asarray(masked, np.float64)
  expect = np.mean((nll * m).sum(1) / t / L)
  np.testing.assert_allclose(float(loss), expect, rtol=1e-5)
  assert 0 < float(aux["masked_fraction"]) < 1
