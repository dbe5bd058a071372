"""The gradient study's oracle: the exact probability of the library's own sampler, and the exact
gradient of its expected reward (checked against finite differences and against the sampler)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.errors import DataError
from daca_jax.studies import gradient_study as gs
from daca_jax.diffusion import make_rollout_fn
from daca_jax.likelihood import any_order_logprob
from daca_jax.models import init_model, make_logits_fn
from daca_jax.tasks.tokenizer import ByteTokenizer
from daca_jax.config.model import ModelConfig
from daca_jax.config.rollout import RolloutConfig

TOK = ByteTokenizer()
ALPHABET = TOK.encode("abc")


@pytest.fixture(scope="module")
def peaked():
  """``peaked(scale)``: a random tiny model whose logits are scaled up, so that its conditionals are far
  from uniform and the two remasking rules give clearly different completion distributions.

  The model is initialised once for the module (about 10 s), and each scale's logits function is one
  object, so the compiled programs below are shared between the tests.
  """
  gd, params = init_model(ModelConfig(vocab_size=260, d_model=32, n_layers=1, n_heads=2, mlp_dim=64), 0)
  base = make_logits_fn(gd)

  @functools.cache
  def fn(scale: float = 4.0):
    return gs.restrict_logits(lambda p, t: scale * base(p, t), ALPHABET)

  return lambda scale=4.0: (fn(scale), params)


# Compiled: run op by op, the enumeration over commit orders took 2 to 3 times as long.
_distribution = jax.jit(gs.completion_distribution, static_argnums=0, static_argnames=("mask_id", "remasking"))


def _prompts(n: int) -> jax.Array:
  return jnp.asarray(gs.encode_prompts(TOK, ["cab", "bca", "acb", "cba"][:n]))


@pytest.mark.parametrize("remasking", ["random", "low_confidence"])
def test_exact_distribution_sums_to_one(peaked, remasking):
  fn, params = peaked()
  comps = jnp.asarray(gs.all_completions(ALPHABET, 3))
  p = _distribution(fn, params, _prompts(4), comps, mask_id=TOK.mask_id, remasking=remasking)
  np.testing.assert_allclose(np.asarray(p).sum(-1), 1.0, atol=2e-5)


def test_random_remasking_probability_is_the_any_order_likelihood(peaked):
  fn, params = peaked()
  comps = jnp.asarray(gs.all_completions(ALPHABET, 3))
  prompts = jnp.repeat(_prompts(1), comps.shape[0], 0)
  exact, oracle = jax.jit(lambda prm: (  # compiled, as _distribution
      gs.sampler_logprob(fn, prm, prompts, comps, mask_id=TOK.mask_id, remasking="random"),
      any_order_logprob(fn, prm, jnp.concatenate([prompts, comps], 1), prompts.shape[1], mask_id=TOK.mask_id)))(params)
  np.testing.assert_allclose(exact, oracle, atol=1e-5)


@pytest.mark.parametrize("remasking,other", [("low_confidence", "random"), ("random", "low_confidence")])
def test_library_sampler_draws_from_the_exact_distribution(peaked, remasking, other):
  fn, params = peaked()
  comps = gs.all_completions(ALPHABET, 3)
  prompt = _prompts(1)
  dist = {r: np.asarray(_distribution(fn, params, prompt, jnp.asarray(comps), mask_id=TOK.mask_id,
                                      remasking=r))[0] for r in (remasking, other)}
  cfg = RolloutConfig(gen_length=3, block_length=3, steps=3, temperature=1.0, remasking=remasking)
  rollout = jax.jit(make_rollout_fn(fn, cfg, mask_id=TOK.mask_id, eos_id=TOK.eos_id))
  n = 12000
  drawn = np.asarray(rollout(params, jnp.repeat(prompt, n, 0), jax.random.PRNGKey(3)).completion)
  index = {tuple(c): i for i, c in enumerate(comps.tolist())}
  freq = np.bincount([index[tuple(c)] for c in drawn.tolist()], minlength=len(comps)) / n
  tv = 0.5 * np.abs(freq - dist[remasking]).sum()
  tv_other = 0.5 * np.abs(freq - dist[other]).sum()
  assert tv < 0.025, tv  # sampling noise of 27 cells at n = 12000 is about 0.01
  assert tv_other > 4 * tv, (tv, tv_other)  # and the test can tell the rules apart


def test_exact_gradient_equals_finite_differences_of_the_enumerated_reward(peaked):
  fn, params = peaked(2.0)
  comps = jnp.asarray(gs.all_completions(ALPHABET[:2], 2))  # a 2-token, 2-letter toy: 4 completions
  fn2 = gs.restrict_logits(fn, ALPHABET[:2])
  prompts = jnp.asarray(gs.encode_prompts(TOK, ["ba", "ab"]))
  rewards = jnp.asarray([[0.0, 0.5, 0.5, 1.0], [1.0, 0.0, 0.25, 0.5]])
  for remasking in ("random", "low_confidence"):
    # compiled, as _distribution
    j = jax.jit(lambda p: gs.expected_reward(fn2, p, prompts, comps, rewards, mask_id=TOK.mask_id,
                                             remasking=remasking))
    grad = jax.jit(jax.grad(j))(params)
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
    d = [jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)]
    norm = jnp.sqrt(sum(jnp.sum(x * x) for x in d))
    direction = jax.tree.unflatten(tree, [x / norm for x in d])  # a unit direction
    eps = 1e-2
    shift = lambda s: jax.tree.map(lambda x, d: x + s * eps * d, params, direction)
    fd = (j(shift(1.0)) - j(shift(-1.0))) / (2 * eps)
    analytic = sum(jnp.vdot(g, d) for g, d in zip(jax.tree.leaves(grad), jax.tree.leaves(direction)))
    assert abs(float(fd)) > 1e-3  # a direction along which J moves
    np.testing.assert_allclose(float(analytic), float(fd), rtol=1e-2)


def test_study_unbiased_arm_points_along_the_true_gradient():
  # Under random remasking the commit order does not depend on θ, so the trajectory estimator's
  # Σ_i log p(o_i | x_{c_i}) is the sampler's log-probability up to a constant, and REINFORCE with a
  # group baseline is unbiased: its mean update must converge to the exact gradient's direction.
  task = gs.SortTask(length=3, num_prompts=4)
  model = ModelConfig(vocab_size=260, d_model=32, n_layers=1, n_heads=2, mlp_dim=64)
  fn, hidden, params = gs.train_toy_model(model, task, TOK, steps=60)
  res = gs.run_study([gs.Arm("trajectory", "uniform")], fn, hidden, params, task, remasking="random",
                     group_size=8, num_batches=16)
  row = res["rows"][0]
  assert row["cos_mean_update"] > 0.9, row["cos_mean_update"]
  assert [c["rollouts"] for c in row["curve"]] == [32, 64, 128, 256]
  assert row["cos_batch"] < row["cos_mean_update"]  # one batch is noisier than the mean of 16


def test_by_estimator_table_puts_each_credit_side_by_side():
  def row(estimator, credit, reg, agreement):
    return {"estimator": estimator, "credit": credit, "cos_mean_update_regularised": reg,
            "curve": [{"agreement": agreement}]}

  result = {"rows": [row("mean_field", "uniform", 0.7, 0.94), row("mean_field", "dps", 0.72, 0.9),
                     row("elbo", "uniform", -0.05, 0.06)]}  # elbo has no dps arm
  assert gs.by_estimator_table(result).splitlines() == [
      "| estimator | cos(E[update], ∇(J−βKL)), uniform / dps credit | batch agreement, uniform / dps |",
      "|---|---|---|",
      "| mean_field | +0.700 / +0.720 | +0.940 / +0.900 |",
      "| elbo | -0.050 / n/a | +0.060 / n/a |"]
  with pytest.raises(DataError, match="only the regularised study has one"):
    gs.by_estimator_table({"rows": [{"estimator": "e", "credit": "uniform", "curve": []}]})
