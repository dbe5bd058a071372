"""Mean-field and stratified (SML) likelihoods: K=1 equals mean-field, every token scored once, K=L
equals the pseudo-likelihood from a direct loop."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.likelihood import LIKELIHOOD, assign_strata, mask_prompt, stratum_positions
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.coupled import CoupledConfig
from daca_jax.likelihood.elbo import ELBOConfig
from daca_jax.likelihood.stratified import StratifiedConfig
from daca_jax.likelihood.trajectory import TrajectoryConfig
from tests.fixed_logit_model import jax_logits, make_params, np_logits

V, MASK, P, L, B = 12, 10, 3, 8, 5


@pytest.fixture(scope="module")
def setup():
  params = jax.tree.map(jnp.asarray, make_params(P + L, V, seed=3))
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(0, 10, (B, P + L)), jnp.int32)
  return params, tokens


def _np_logp(params, x, targets):
  """log-probs under the sampler's policy: the softmax over every id but [MASK]."""
  logits = np_logits(params, x)[:, P:]
  logits[..., MASK] = -np.inf
  logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
  return np.take_along_axis(logits, targets[..., None], -1)[..., 0] - logz


@pytest.mark.parametrize("p_mask_prompt", [0.0, 0.5])
def test_stratified_k1_equals_mean_field_exactly(setup, p_mask_prompt):
  params, tokens = setup
  key = jax.random.PRNGKey(11)
  mf = LIKELIHOOD.get("mean_field")(jax_logits, params, tokens, P, key,
                                    LikelihoodConfig(p_mask_prompt=p_mask_prompt), mask_id=MASK).logp
  sml = LIKELIHOOD.get("stratified")(jax_logits, params, tokens, P, key,
                                     LikelihoodConfig(stratified=StratifiedConfig(num_strata=1), p_mask_prompt=p_mask_prompt), mask_id=MASK).logp
  np.testing.assert_array_equal(np.asarray(mf), np.asarray(sml))


def test_mean_field_matches_numpy(setup):
  params, tokens = setup
  got = LIKELIHOOD.get("mean_field")(jax_logits, params, tokens, P, jax.random.PRNGKey(0),
                                     LikelihoodConfig(p_mask_prompt=0.0), mask_id=MASK).logp
  x = np.asarray(tokens).copy()
  x[:, P:] = MASK
  np.testing.assert_allclose(got, _np_logp(params, x, np.asarray(tokens)[:, P:]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("partition", ["random", "per_prompt", "strided", "contiguous", "commit_order"])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 8])
def test_strata_partition_completion(partition, k):
  commit = jnp.asarray(np.random.default_rng(1).integers(0, 4, (B, L)))
  prompt = jnp.asarray(np.random.default_rng(2).integers(0, 10, (B, P)), jnp.int32)
  strata = np.asarray(assign_strata(jax.random.PRNGKey(2), B, L, k, partition, commit, prompt=prompt))
  assert strata.min() >= 0 and strata.max() < k
  for row in strata:  # every position in exactly one stratum, sizes equal up to one
    sizes = np.bincount(row, minlength=k)
    assert sizes.sum() == L and sizes.max() - sizes.min() <= 1
  if partition == "commit_order":  # strata ordered by commit step
    for row, c in zip(strata, np.asarray(commit)):
      assert all(row[i] <= row[j] for i in range(L) for j in range(L) if c[i] < c[j])


def test_random_partition_changes_with_key_and_row():
  s1 = np.asarray(assign_strata(jax.random.PRNGKey(0), 64, L, 4))
  s2 = np.asarray(assign_strata(jax.random.PRNGKey(1), 64, L, 4))
  assert (s1 != s2).any() and len({tuple(r) for r in s1}) > 1


def test_per_prompt_partition_is_shared_by_a_group_only():
  """Rows with the same prompt tokens get the same partition (for a key), other prompts and keys
  another one; the estimator then scores identical completions of one prompt identically."""
  rng = np.random.default_rng(7)
  groups, g = 16, 4
  prompts = np.repeat(rng.integers(0, 10, (groups, P)), g, axis=0)
  s = np.asarray(assign_strata(jax.random.PRNGKey(0), groups * g, L, 4, "per_prompt", prompt=jnp.asarray(prompts)))
  rows = s.reshape(groups, g, L)
  assert (rows == rows[:, :1]).all()  # shared within each group
  assert len({tuple(r[0]) for r in rows}) > groups // 2  # and (almost always) not across groups
  s_other = np.asarray(assign_strata(jax.random.PRNGKey(1), groups * g, L, 4, "per_prompt",
                                     prompt=jnp.asarray(prompts)))
  assert (s_other != s).any()
  with pytest.raises(ValueError, match="per_prompt.*prompt"):
    assign_strata(jax.random.PRNGKey(0), 4, L, 2, "per_prompt")
  # Estimator: a group of identical sequences scores identically under per_prompt (common random
  # masks), but not under per-sequence random strata.
  params = jax.tree.map(jnp.asarray, make_params(P + L, V, seed=3))
  one = rng.integers(0, 10, (1, P + L))
  tokens = jnp.asarray(np.repeat(one, 8, axis=0), jnp.int32)
  f = LIKELIHOOD.get("stratified")
  shared = np.asarray(f(jax_logits, params, tokens, P, jax.random.PRNGKey(3), LikelihoodConfig(
      stratified=StratifiedConfig(num_strata=4, partition="per_prompt"), p_mask_prompt=0.0),
      mask_id=MASK).logp)
  np.testing.assert_array_equal(shared, np.broadcast_to(shared[:1], shared.shape))
  apart = np.asarray(f(jax_logits, params, tokens, P, jax.random.PRNGKey(3), LikelihoodConfig(
      stratified=StratifiedConfig(num_strata=4), p_mask_prompt=0.0), mask_id=MASK).logp)
  assert not np.allclose(apart, apart[:1])


@pytest.mark.parametrize("k", [2, 4])
def test_each_token_scored_once_from_the_pass_that_masks_it(setup, k):
  """Oracle: for every token, rebuild by hand the pass that masks it (its stratum masked, the rest of
  the completion visible) and score it with the numpy model."""
  params, tokens = setup
  key = jax.random.PRNGKey(5)
  cfg = LikelihoodConfig(stratified=StratifiedConfig(num_strata=k), p_mask_prompt=0.0)
  got = np.asarray(LIKELIHOOD.get("stratified")(jax_logits, params, tokens, P, key, cfg, mask_id=MASK).logp)
  _, k_part = jax.random.split(key)
  strata = np.asarray(assign_strata(k_part, B, L, k))
  tok = np.asarray(tokens)
  expect = np.zeros((B, L))
  for s in range(k):
    x = tok.copy()
    x[:, P:][strata == s] = MASK
    lp = _np_logp(params, x, tok[:, P:])
    expect[strata == s] = lp[strata == s]
  np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-5)


def test_k_equals_l_is_pseudo_likelihood(setup):
  params, tokens = setup
  cfg = LikelihoodConfig(stratified=StratifiedConfig(num_strata=L), p_mask_prompt=0.0)
  got = np.asarray(LIKELIHOOD.get("stratified")(jax_logits, params, tokens, P, jax.random.PRNGKey(9), cfg,
                                                mask_id=MASK).logp)
  tok = np.asarray(tokens)
  expect = np.zeros((B, L))
  for i in range(L):  # pseudo-likelihood: mask one position, everything else visible
    x = tok.copy()
    x[:, P + i] = MASK
    expect[:, i] = _np_logp(params, x, tok[:, P:])[:, i]
  np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-5)


def test_strata_batch_lax_map_equals_vmap(setup):
  params, tokens = setup
  key = jax.random.PRNGKey(4)
  f = LIKELIHOOD.get("stratified")
  a = f(jax_logits, params, tokens, P, key, LikelihoodConfig(stratified=StratifiedConfig(num_strata=4)), mask_id=MASK).logp
  b = f(jax_logits, params, tokens, P, key, LikelihoodConfig(stratified=StratifiedConfig(num_strata=4), strata_batch=2), mask_id=MASK).logp
  np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("partition", ["random", "strided", "contiguous"])
@pytest.mark.parametrize("k", [1, 3, 4, 8])
def test_stratum_positions_list_every_position_once(partition, k):
  strata = assign_strata(jax.random.PRNGKey(3), B, L, k, partition)
  pos, valid = (np.asarray(a) for a in stratum_positions(strata, k))
  s = np.asarray(strata)
  assert pos.shape == valid.shape == (k, B, -(-L // k))
  for b in range(B):
    for j in range(k):  # the valid slots of stratum j: exactly its positions, in increasing order
      np.testing.assert_array_equal(pos[j, b][valid[j, b]], np.flatnonzero(s[b] == j))
      assert (s[b, pos[j, b]] == j).all()  # padding repeats a position of the same stratum


def test_score_positions_equals_full_gather():
  """The model split (gather hidden, project C positions, chunked or not) and a plain LogitsFn
  (gather logits) give the full log-softmax's values at the chosen positions."""
  from daca_jax.likelihood.common import score_positions, token_logprobs
  from daca_jax.models import init_model, make_logits_fn, tiny_config

  cfg = tiny_config(d_model=32, n_layers=1, n_heads=2, mlp_dim=32, vocab_size=30, mask_token_id=29)
  gd, prm = init_model(cfg, seed=0)
  rng = np.random.default_rng(4)
  toks = jnp.asarray(rng.integers(0, 29, (3, 9)), jnp.int32)
  pos = jnp.asarray(rng.integers(0, 9, (3, 4)), jnp.int32)
  tgt = jnp.asarray(rng.integers(0, 30, (3, 4)), jnp.int32)
  full = np.asarray(jax.nn.log_softmax(make_logits_fn(gd)(prm, toks)))
  want = full[np.arange(3)[:, None], np.asarray(pos), np.asarray(tgt)]
  plain = lambda p, t: make_logits_fn(gd)(p, t)  # no model split attached
  for fn in (make_logits_fn(gd), make_logits_fn(gd, logprob_chunk=3), plain):
    np.testing.assert_allclose(np.asarray(score_positions(fn, prm, toks, tgt, pos)), want, rtol=1e-5,
                               atol=1e-5)
  # With mask_id: the sampler's policy, normalised without [MASK] (a [MASK] target is ~ -1e30).
  logits = np.asarray(make_logits_fn(gd)(prm, toks), np.float64)
  logits[..., 29] = -np.inf
  policy = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
      - logits.max(-1, keepdims=True)
  tgt = tgt.at[0, 0].set(29)
  want = policy[np.arange(3)[:, None], np.asarray(pos), np.asarray(tgt)]
  real = np.asarray(tgt) != 29
  assert (~real).any() and real.any()
  for fn in (make_logits_fn(gd), make_logits_fn(gd, logprob_chunk=3), plain):
    got = np.asarray(score_positions(fn, prm, toks, tgt, pos, mask_id=29))
    np.testing.assert_allclose(got[real], want[real], rtol=1e-5, atol=1e-5)
    assert (got[~real] < -1e29).all()


def test_strata_batch_bounds_update_memory_with_equal_gradients():
  """strata_batch=1 rematerialises each pass: the gradient equals the vmapped one, and the compiled
  scratch of value_and_grad holds about one pass's activations instead of K."""
  from daca_jax.models import init_model, make_logits_fn, tiny_config

  cfg = tiny_config(d_model=64, n_layers=2, n_heads=4, mlp_dim=256, vocab_size=40, mask_token_id=39)
  gd, prm = init_model(cfg, seed=0)
  toks = jnp.asarray(np.random.default_rng(5).integers(0, 39, (16, 40)), jnp.int32)
  f = LIKELIHOOD.get("stratified")

  def loss(sb):
    lc = LikelihoodConfig(stratified=StratifiedConfig(num_strata=4), strata_batch=sb)
    return lambda p: jnp.sum(f(make_logits_fn(gd), p, toks, 8, jax.random.PRNGKey(0), lc, mask_id=39).logp)

  out, scratch = {}, {}
  for sb in (0, 1):
    compiled = jax.jit(jax.value_and_grad(loss(sb))).lower(prm).compile()
    scratch[sb] = compiled.memory_analysis().temp_size_in_bytes
    out[sb] = compiled(prm)
  np.testing.assert_allclose(float(out[1][0]), float(out[0][0]), rtol=1e-5)
  for a, b in zip(jax.tree.leaves(out[0][1]), jax.tree.leaves(out[1][1])):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5)
  assert scratch[1] < 0.5 * scratch[0], scratch


def test_prompt_mask_rate():
  x = jnp.zeros((200, 50), jnp.int32)
  m = np.asarray(mask_prompt(jax.random.PRNGKey(0), x, 0.15, MASK)) == MASK
  assert abs(m.mean() - 0.15) < 0.01
  assert (np.asarray(mask_prompt(jax.random.PRNGKey(0), x, 0.0, MASK)) == 0).all()


def test_assign_strata_rejects_bad_k():
  with pytest.raises(ValueError, match="num_strata"):
    assign_strata(jax.random.PRNGKey(0), 2, 4, 5)


@pytest.mark.parametrize("full_pass", [True, False])
def test_coupled_matches_numpy(setup, full_pass):
  """Each token is scored in the pass that masks it (M or its complement), weighted 1/t or 1/(1-t),
  and averaged with the fully-masked pass when asked (DiffuCoder)."""
  from daca_jax.likelihood import coupled_masks
  params, tokens = setup
  key = jax.random.PRNGKey(21)
  cfg = LikelihoodConfig(p_mask_prompt=0.0, coupled=CoupledConfig(full_pass=full_pass))
  scores = LIKELIHOOD.get("coupled")(jax_logits, params, tokens, P, key, cfg, mask_id=MASK)
  assert scores.kind == "elbo" and scores.num_states == (3 if full_pass else 2)
  got = np.asarray(scores.contributions())
  _, k_est = jax.random.split(key)
  t, first = (np.asarray(a) for a in coupled_masks(k_est, B, L, 0.2, 0.8))
  assert ((0.2 <= t) & (t <= 0.8)).all() and first.any() and (~first).any()
  tok = np.asarray(tokens)
  def lp(mask):
    x = tok.copy()
    x[:, P:][mask] = MASK
    return _np_logp(params, x, tok[:, P:])
  weighted = np.where(first, lp(first) / t[:, None], lp(~first) / (1 - t[:, None]))
  expect = 0.5 * (lp(np.ones_like(first)) + weighted) if full_pass else weighted
  np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("nodes", [2, 3])
def test_elbo_matches_numpy(setup, nodes):
  from daca_jax.likelihood import gauss_legendre_01
  params, tokens = setup
  key = jax.random.PRNGKey(8)
  cfg = LikelihoodConfig(p_mask_prompt=0.0, elbo=ELBOConfig(nodes=nodes))
  scores = LIKELIHOOD.get("elbo")(jax_logits, params, tokens, P, key, cfg, mask_id=MASK)
  assert scores.kind == "elbo" and scores.num_states == nodes
  got = np.asarray(scores.contributions())
  t, w = gauss_legendre_01(nodes)
  np.testing.assert_allclose(w.sum(), 1.0, rtol=1e-6)
  np.testing.assert_allclose((w * t ** 2).sum(), 1 / 3, rtol=1e-5)  # exact for polynomials of degree < 2n
  _, k_est = jax.random.split(key)
  masked = np.asarray(jax.random.uniform(k_est, (nodes, B, L))) < t[:, None, None]
  tok = np.asarray(tokens)
  expect = np.zeros((B, L))
  for n in range(nodes):
    x = tok.copy()
    x[:, P:][masked[n]] = MASK
    expect += w[n] / t[n] * masked[n] * _np_logp(params, x, tok[:, P:])
  np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-5)


def test_any_order_probabilities_sum_to_one():
  """Σ over all V^L completions of exp(log p(o)) = 1 (V = 4 including the mask id, L = 4)."""
  from daca_jax.likelihood import any_order_logprob
  v, p, length, mask = 4, 2, 4, 3
  params = jax.tree.map(jnp.asarray, make_params(p + length, v, seed=7, scale=1.5))
  comps = np.array(list(itertools.product(range(v), repeat=length)))
  tokens = jnp.asarray(np.concatenate([np.tile([[1, 2]], (len(comps), 1)), comps], 1), jnp.int32)
  lp = np.asarray(any_order_logprob(jax_logits, params, tokens, p, mask_id=mask), np.float64)
  np.testing.assert_allclose(np.exp(lp).sum(), 1.0, rtol=1e-4)


def test_any_order_matches_brute_force_over_orders(setup):
  """Against a direct average over all L! orders (L = 4) computed with the numpy model."""
  import math
  from daca_jax.likelihood import any_order_logprob
  params, tokens = setup
  tok = np.asarray(tokens)[:, : P + 4]
  got = np.asarray(any_order_logprob(jax_logits, params, jnp.asarray(tok), P, mask_id=MASK))
  total = np.zeros(B)
  for order in itertools.permutations(range(4)):
    x = tok.copy()
    x[:, P:] = MASK
    logp = np.zeros(B)
    for i in order:
      logp += _np_logp(params, x, tok[:, P:])[:, i]
      x[:, P + i] = tok[:, P + i]
    total += np.exp(logp)
  np.testing.assert_allclose(got, np.log(total / math.factorial(4)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block_length,steps", [(8, 4), (4, 8)])
def test_trajectory_equals_the_samplers_own_commit_probabilities(block_length, steps):
  """Scored in the rebuilt state it was generated from, each token's probability is exactly the one
  the sampler recorded when it committed it (commit_conf) — an oracle from a separate code path."""
  from daca_jax.diffusion import rollout
  from daca_jax.config.rollout import RolloutConfig
  params = jax.tree.map(jnp.asarray, make_params(P + L, V, seed=4, scale=1.5))
  rcfg = RolloutConfig(gen_length=L, block_length=block_length, steps=steps, temperature=1.0)
  prompts = jnp.asarray(np.random.default_rng(2).integers(0, 9, (B, P)), jnp.int32)
  traj = rollout(jax_logits, params, prompts, jax.random.PRNGKey(3), rcfg, mask_id=MASK, eos_id=11)
  cfg = LikelihoodConfig(p_mask_prompt=0.0, trajectory_steps=steps)
  got = LIKELIHOOD.get("trajectory")(jax_logits, params, traj.tokens, P, jax.random.PRNGKey(0), cfg,
                                     mask_id=MASK, commit_step=traj.commit_step).logp
  np.testing.assert_allclose(np.exp(np.asarray(got)), np.asarray(traj.commit_conf), rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="commit_step"):
    LIKELIHOOD.get("trajectory")(jax_logits, params, traj.tokens, P, jax.random.PRNGKey(0), cfg, mask_id=MASK)


def test_grouped_trajectory_scores_each_token_at_the_start_of_its_run():
  """trajectory.groups = G_s: a token committed at step c is scored in the state at the start of run
  floor(c G_s / S) (run g starts at ceil(g S / G_s)); checked against a numpy rebuild of that state.
  One group is the mean-field estimate; S groups are the plain trajectory estimator."""
  from daca_jax.diffusion import rollout
  from daca_jax.config.rollout import RolloutConfig
  steps = 8
  params = jax.tree.map(jnp.asarray, make_params(P + L, V, seed=4, scale=1.5))
  rcfg = RolloutConfig(gen_length=L, block_length=L, steps=steps, temperature=1.0)
  prompts = jnp.asarray(np.random.default_rng(2).integers(0, 9, (B, P)), jnp.int32)
  traj = rollout(jax_logits, params, prompts, jax.random.PRNGKey(3), rcfg, mask_id=MASK, eos_id=11)
  tokens, commit = np.asarray(traj.tokens), np.asarray(traj.commit_step)
  real = tokens[:, P:] != MASK  # this random model can commit the mask id itself
  key = jax.random.PRNGKey(0)
  est = lambda groups: np.asarray(LIKELIHOOD.get("trajectory")(
      jax_logits, params, traj.tokens, P, key, LikelihoodConfig(p_mask_prompt=0.0, trajectory_steps=steps,
                                                               trajectory=TrajectoryConfig(groups=groups)),
      mask_id=MASK, commit_step=traj.commit_step).logp)
  for groups in (3, 5):
    expect = np.zeros((B, L))
    for b in range(B):
      for i in range(L):
        start = -(-(commit[b, i] * groups // steps) * steps // groups)
        x = tokens[b:b + 1].copy()
        x[0, P:][commit[b] >= start] = MASK
        expect[b, i] = _np_logp(params, x, tokens[b:b + 1, P:])[0, i]
    np.testing.assert_allclose(est(groups), expect, rtol=1e-5, atol=1e-5)
  mean_field = LIKELIHOOD.get("mean_field")(jax_logits, params, traj.tokens, P, key,
                                            LikelihoodConfig(p_mask_prompt=0.0), mask_id=MASK).logp
  np.testing.assert_allclose(est(1), mean_field, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(np.exp(est(steps))[real], np.asarray(traj.commit_conf)[real], rtol=1e-5, atol=1e-6)
