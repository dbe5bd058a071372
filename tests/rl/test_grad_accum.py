"""Gradient accumulation (rl.grad_accum) against the whole batch's gradient: the exact oracle is the
same gradient computed in one pass (grad_accum = 1) under the same per-row likelihood masks, for every
registered objective, at the first inner update (θ = θ_old) and a later one (θ_old given), and through
μ SGD updates (a scale-sensitive optimizer: Adam would hide a gradient off by a constant factor)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from daca_jax.contracts import ParamSplit
from daca_jax.errors import ConfigError
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.parallel import per_sequence_keys
from daca_jax.rl.learner import GRPOLearner
from daca_jax.rl.methods import OBJECTIVES
from daca_jax.rl.update import make_objective_grad, make_update
from daca_jax.rl.accumulate import check_grad_accum
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.rldf import RLDFConfig
from daca_jax.likelihood.spg_block import SPGBlockConfig
from daca_jax.likelihood.stepmerge import StepMergeConfig
from daca_jax.likelihood.stratified import StratifiedConfig
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig
from tests.fixed_logit_model import jax_logits, make_params

V, MASK, EOS, P, G, PROMPTS = 12, 10, 11, 3, 4, 4
ROLLOUT = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=1.0)
# Each objective with an estimator of another kind: S = 1 log-probs with random strata, the mean-field
# pass, ELBO targets (weights) over 2 quadrature nodes, RLDF's rebuilt states (S = 2, commit_now).
CASES = {"diffu_grpo": "stratified", "wd1": "mean_field", "gspo": "stratified", "gdpo": "elbo",
         "reinforce_pp": "stratified", "rldf": "rldf",
         # SPG's block-masked contexts (S = 2, per-context mask rates); ESPO's summed ELBO terms (S = 4 passes).
         "spg": "spg_block", "espo": "espo_elbo",
         # BGPO's Monte-Carlo ELBO samples (one pass each)
         "bgpo": "elbo_mc",
         "map": "stepmerge"}


def _cfg(objective, likelihood, grad_accum, **rl):
  lik = LikelihoodConfig(stratified=StratifiedConfig(num_strata=2), rldf=RLDFConfig(states=2), p_mask_prompt=0.2,
                         spg_block=SPGBlockConfig(num_t=2, block_length=4),
                         stepmerge=StepMergeConfig(segments=2, sample=1),
                         elbo_terms="summed" if objective == "espo" else "per_target")
  return TrainConfig(rollout=ROLLOUT, likelihood=lik,
                     rl=RLConfig(objective=objective, credit="dps", likelihood=likelihood, group_size=G,
                                 prompts_per_step=PROMPTS, learning_rate=0.05, warmup_steps=0, clip_eps=0.2,
                                 grad_accum=grad_accum, **{"beta": 0.04, "num_iterations": 1, **rl}))


@functools.lru_cache(maxsize=None)
def _batch():
  """A rollout of 16 rows (4 groups), rewards, DPS weights, θ, θ_ref and θ_old (not θ)."""
  params = jax.tree.map(jnp.asarray, make_params(P + 8, V, seed=0, scale=1.0))
  learner = GRPOLearner(jax_logits, _cfg("diffu_grpo", "stratified", 1), mask_id=MASK, eos_id=EOS)
  prompts = jnp.asarray(np.repeat(np.random.default_rng(0).integers(0, 9, (PROMPTS, P)), G, 0), jnp.int32)
  traj = learner.rollout(params, prompts, jax.random.PRNGKey(0))
  rewards = jnp.asarray(np.random.default_rng(1).choice([0.0, 0.5, 1.0], size=PROMPTS * G), jnp.float32)
  weights = learner.credit_weights(traj)
  ref = jax.tree.map(lambda x: 0.9 * x, params)
  old = jax.tree.map(lambda x: x + 0.05 * jnp.sin(3.0 * x), params)
  return params, ref, old, traj, rewards, weights


def _grads(objective, likelihood, grad_accum, **rl):
  """(grads, aux) at the first inner update and at a later one (θ_old given), one compilation."""
  cfg = _cfg(objective, likelihood, grad_accum, **rl)
  est = per_sequence_keys(LIKELIHOOD.get(likelihood)) if grad_accum == 1 else None
  grad = make_objective_grad(jax_logits, cfg, mask_id=MASK, estimator=est)
  params, ref, old, traj, rewards, weights = _batch()

  @jax.jit
  def both(params, ref, old, traj, rewards, weights, key):
    return (grad(params, ref, traj, rewards, weights, key),
            grad(params, ref, traj, rewards, weights, key, old_params=old))

  return both(params, ref, old, traj, rewards, weights, jax.random.PRNGKey(7))


def _max_diff(a, b):
  return max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_cases_cover_every_registered_objective():
  assert set(CASES) == set(OBJECTIVES.names())


@pytest.mark.parametrize("objective", [o if o in ("diffu_grpo", "rldf") else pytest.param(o, marks=pytest.mark.slow)
                                       for o in sorted(CASES)])  # ~15 s each; reinforce_pp also below
def test_accumulated_gradient_equals_the_whole_batch(objective):
  likelihood = CASES[objective]
  want = _grads(objective, likelihood, 1)
  size = max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(want[1][0]))
  assert size > 1e-3  # a real gradient at the later update
  for grad_accum in (4,):
    got = _grads(objective, likelihood, grad_accum)
    for (g_want, aux_want), (g_got, aux_got) in zip(want, got):
      assert _max_diff(g_want, g_got) < 1e-5 * size, (grad_accum, _max_diff(g_want, g_got))
      assert set(aux_got) == set(aux_want)
      for k in aux_want:
        np.testing.assert_allclose(float(aux_got[k]), float(aux_want[k]), rtol=1e-5, atol=1e-6, err_msg=k)


def test_accumulation_without_a_reference_pass_and_with_batch_whitened_advantages():
  """β = 0 (the masks then come from θ's own no-gradient pass) and batch-whitened advantages, whose
  mean and std span the whole batch, not a micro-batch."""
  want = _grads("wd1", "stratified", 1, beta=0.0, advantage="batch_whiten")
  got = _grads("wd1", "stratified", 4, beta=0.0, advantage="batch_whiten")
  for (g_want, aux_want), (g_got, aux_got) in zip(want, got):
    assert _max_diff(g_want, g_got) < 1e-6
    assert float(aux_got["loss"]) == pytest.approx(float(aux_want["loss"]), rel=1e-5, abs=1e-7)


def test_per_micro_batch_normalisation_would_be_caught():
  """The oracle can fail: per-micro-batch advantages (each half of the batch whitened alone) change the
  gradient by far more than the tolerance above."""
  params, ref, _, traj, rewards, weights = _batch()
  cfg = _cfg("diffu_grpo", "stratified", 1, advantage="batch_whiten")
  grad = make_objective_grad(jax_logits, cfg, mask_id=MASK, estimator=per_sequence_keys(LIKELIHOOD.get("stratified")))
  whiten = lambda r: (r - r.mean()) / (r.std() + 1e-8)
  halves = jnp.concatenate([whiten(rewards[:8]), whiten(rewards[8:])])
  key = jax.random.PRNGKey(7)
  whole = jax.jit(lambda: grad(params, ref, traj, rewards, weights, key)[0])()
  split = jax.jit(lambda: grad(params, ref, traj, rewards, weights, key, advantages=halves)[0])()
  assert _max_diff(whole, split) > 1e-2 * max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(whole))


@pytest.mark.parametrize("objective", ["diffu_grpo", "reinforce_pp"])
def test_mu_inner_updates_with_accumulation_equal_the_whole_batch(objective):
  """μ = 3 SGD updates (θ_old's log-probs in micro-batches at every inner update), also with a
  trainable part only (LoRA-style: C and E frozen by stop_gradient in the model and left out of the
  accumulated gradient, which is then zeros for them, as the one-batch gradient)."""
  params, ref, _, traj, rewards, weights = _batch()
  split = ParamSplit(trainable=lambda p: {"A": p["A"]}, replace=lambda p, t: {**p, **t})
  frozen_ce = lambda p, x: jax_logits({**p, "C": jax.lax.stop_gradient(p["C"]),
                                       "E": jax.lax.stop_gradient(p["E"])}, x)
  sgd = optax.sgd(0.5)
  out = {}
  for grad_accum in (1, 2):
    cfg = _cfg(objective, "stratified", grad_accum, num_iterations=3, grad_agreement=False)
    est = per_sequence_keys(LIKELIHOOD.get("stratified")) if grad_accum == 1 else None
    for name, ps, fn in (("full", None, jax_logits), ("split", split, frozen_ce)):
      upd = make_update(fn, cfg, sgd, mask_id=MASK, estimator=est, param_split=ps)
      out[grad_accum, name] = jax.jit(upd)(params, sgd.init(params), ref, traj, rewards, weights,
                                           jax.random.PRNGKey(9))
  for name in ("full", "split"):
    (p1, _, m1), (p2, _, m2) = out[1, name], out[2, name]
    moved = _max_diff(p1, params)
    assert moved > 1e-3
    assert _max_diff(p1, p2) < 1e-5 * moved, (name, _max_diff(p1, p2), moved)
    for k in m1:
      np.testing.assert_allclose(float(m2[k]), float(m1[k]), rtol=1e-5, atol=1e-6, err_msg=k)
  for k in ("C", "E"):  # frozen under the split
    np.testing.assert_array_equal(np.asarray(out[2, "split"][0][k]), np.asarray(params[k]))


def test_micro_batches_must_split_over_the_batch_devices():
  check_grad_accum(16, 2, 4, 8)  # 8 rows per micro-batch, 1 per device
  with pytest.raises(ConfigError, match=r"rl\.grad_accum=4.*multiple of the 8 batch shards.*16 rows / 4 = 4"):
    check_grad_accum(16, 4, 4, 8)
  with pytest.raises(ConfigError, match=r"rl\.grad_accum=8.*divisor of the 4 groups"):
    check_grad_accum(16, 8, 4)


def test_grad_accum_must_leave_whole_groups():
  with pytest.raises(ConfigError, match=r"rl\.grad_accum=3.*rl\.prompts_per_step=4"):
    RLConfig(prompts_per_step=4, grad_accum=3).validate()
  with pytest.raises(ConfigError, match=r"rl\.grad_accum=0"):
    RLConfig(grad_accum=0).validate()
  with pytest.raises(ConfigError, match=r"rl\.rollout_batch=3.*32 rows"):
    RLConfig(prompts_per_step=4, group_size=8, rollout_batch=3).validate()


def test_the_references_mask_seed_indexing():
  """d1's, SPG's and MAP's trainers pick seed ``_step % μ`` with ``_step`` counting accumulation micro-steps."""
  from daca_jax.rl.update import mask_seed_indices

  seeds = lambda ga, mu: np.array([np.asarray(mask_seed_indices(g, ga, mu)) for g in range(mu)])  # [update, k]
  assert seeds(4, 4).tolist() == [[1, 2, 3, 0]] * 4  # SPG's Sudoku: each micro-batch keeps its masks
  per_micro_batch = lambda s: [len(np.unique(col)) for col in s.T]
  assert per_micro_batch(seeds(2, 12)) == [6, 6] and per_micro_batch(seeds(2, 8)) == [4, 4]  # d1: 6 of 12, 4 of 8
  assert sorted(set(seeds(4, 12)[:, 0].tolist())) == [1, 5, 9]  # MAP: a row's micro-batch uses 3 of 12
  assert seeds(1, 5)[:, 0].tolist() == [1, 2, 3, 4, 0]  # one micro-batch: a new seed every update


def test_mask_seed_reuse_is_the_accumulated_gradient_under_the_references_keys():
  """μ = 2 SGD updates with M = 2 micro-batches and rl.mask_seed_reuse: each micro-batch scores with the same
  masks at both updates (seeds 1 and 0). The oracle applies the accumulated gradient twice under those keys."""
  params, ref, old, traj, rewards, weights = _batch()
  sgd, key = optax.sgd(0.5), jax.random.PRNGKey(9)
  cfg = _cfg("diffu_grpo", "stratified", 2, num_iterations=2, grad_agreement=False, mask_seed_reuse=True)
  got, _, _ = jax.jit(make_update(jax_logits, cfg, sgd, mask_id=MASK))(params, sgd.init(params), ref, traj, rewards,
                                                                      weights, key)
  grad = jax.jit(make_objective_grad(jax_logits, cfg, mask_id=MASK), static_argnames=())
  keys = jnp.stack([jax.random.fold_in(key, 1), jax.random.fold_in(key, 0)])  # micro-batch 0: seed 1, 1: seed 0
  g0, _ = grad(params, ref, traj, rewards, weights, keys)
  p1 = optax.apply_updates(params, sgd.update(g0, sgd.init(params), params)[0])
  g1, _ = grad(p1, ref, traj, rewards, weights, keys, old_params=params)
  want = optax.apply_updates(p1, sgd.update(g1, sgd.init(params), p1)[0])
  assert _max_diff(got, want) < 1e-6 * _max_diff(want, params)
  fresh = _cfg("diffu_grpo", "stratified", 2, num_iterations=2, grad_agreement=False)
  other, _, _ = jax.jit(make_update(jax_logits, fresh, sgd, mask_id=MASK))(params, sgd.init(params), ref, traj,
                                                                          rewards, weights, key)
  assert _max_diff(other, got) > 1e-4 * _max_diff(want, params)  # a new draw per update is another update


def test_the_objective_gradient_alone_takes_one_key_under_mask_seed_reuse():
  """Outside make_update (a user's own loop, the learner's objective_grad) one key serves every micro-batch,
  as without the setting."""
  params, ref, old, traj, rewards, weights = _batch()
  key = jax.random.PRNGKey(3)
  got = [make_objective_grad(jax_logits, _cfg("diffu_grpo", "stratified", 2, mask_seed_reuse=reuse), mask_id=MASK)(
      params, ref, traj, rewards, weights, key, old_params=old)[0] for reuse in (True, False)]
  assert _max_diff(got[0], got[1]) == 0.0
