"""GRPO learner wiring: μ inner iterations with a new likelihood key each, the same masks for θ, θ_old
and θ_ref, θ_old = the rollout policy — checked against a hand-written loop."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from daca_jax.credit import CREDIT
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.contracts import PolicyBatch
from daca_jax.rl.advantages import group_advantages
from daca_jax.rl.learner import GRPOLearner
from daca_jax.rl.methods import OBJECTIVES
from daca_jax.config.credit import CreditConfig
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.stratified import StratifiedConfig
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig
from tests.fixed_logit_model import jax_logits, learner_rollout, make_params

V, MASK, EOS, P = 12, 10, 11, 3


def test_update_matches_hand_written_loop():
  rollout = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=1.0)
  cfg = TrainConfig(rollout=rollout, credit=CreditConfig(), likelihood=LikelihoodConfig(stratified=StratifiedConfig(num_strata=2), p_mask_prompt=0.2),
                    rl=RLConfig(credit="dps", likelihood="stratified", num_iterations=3, group_size=4, beta=0.1,
                                learning_rate=0.05, warmup_steps=0, clip_eps=0.2))
  params, learner, traj, rewards, weights = learner_rollout(cfg, V, MASK, EOS, P)
  ref = jax.tree.map(lambda x: x * 0.9, params)
  key = jax.random.PRNGKey(42)
  got_params, _, metrics = learner.update(params, learner.init_opt_state(params), ref, traj, rewards, weights, key)

  # Hand-written: plain Python loop over inner iterations.
  lik = LIKELIHOOD.get("stratified")
  obj = OBJECTIVES.get("diffu_grpo")
  # Each piece compiled (op by op, the loop took a third of the test's time); the loop itself stays Python.
  logp = jax.jit(lambda prm, k: lik(jax_logits, prm, traj.tokens, P, k, cfg.likelihood, mask_id=MASK,
                                    commit_step=traj.commit_step).logp)
  loss_and_grad = jax.jit(jax.value_and_grad(lambda q, b, k: obj(logp(q, k), b, cfg.rl), has_aux=True))
  opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(0.05, weight_decay=0.0))
  state = opt.init(params)
  prm = params
  adv = group_advantages(rewards, 4)
  w = CREDIT.get("dps")(traj, cfg.credit, rollout)
  losses = []
  for j in range(3):
    k = jax.random.fold_in(key, j)
    batch = PolicyBatch(logp_old=logp(params, k), logp_ref=logp(ref, k), advantages=adv, weights=w,
                        mask=traj.completion_mask)
    (loss, _), g = loss_and_grad(prm, batch, k)
    losses.append(float(loss))
    upd, state = opt.update(g, state, prm)
    prm = optax.apply_updates(prm, upd)
  for a, b in zip(jax.tree.leaves(got_params), jax.tree.leaves(prm)):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
  np.testing.assert_allclose(float(metrics["loss"]), np.mean(losses), rtol=1e-4, atol=1e-6)
  assert np.asarray(weights).std() > 0  # DPS actually varied the weights here


def test_pure_update_factory_is_the_learners_update_in_a_users_own_loop():
  """make_update builds the step from a config and an optimizer alone (no learner): two μ = 2 updates
  with it equal GRPOLearner.update's, and a wrong-shaped reward is named at trace time."""
  import pytest

  from daca_jax.errors import ShapeError
  from daca_jax.rl.optim import make_optimizer
  from daca_jax.rl.update import make_update

  rollout = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=1.0)
  cfg = TrainConfig(rollout=rollout, credit=CreditConfig(), likelihood=LikelihoodConfig(stratified=StratifiedConfig(num_strata=2)),
                    rl=RLConfig(credit="uniform", likelihood="stratified", num_iterations=2, group_size=4,
                                beta=0.05, learning_rate=0.05, warmup_steps=0, grad_agreement=False))
  params = jax.tree.map(jnp.asarray, make_params(P + 8, V, seed=1, scale=1.0))
  learner = GRPOLearner(jax_logits, cfg, mask_id=MASK, eos_id=EOS)
  prompts = jnp.asarray(np.random.default_rng(2).integers(0, 9, (8, P)), jnp.int32)
  traj = learner.rollout(params, prompts, jax.random.PRNGKey(1))
  rewards = jnp.asarray(np.random.default_rng(3).uniform(size=8), jnp.float32)
  weights = traj.completion_mask
  optimizer, _ = make_optimizer(cfg.rl.learning_rate, cfg.rl.warmup_steps, cfg.rl.weight_decay,
                                cfg.rl.max_grad_norm, eps=cfg.rl.adam_eps)
  update = jax.jit(make_update(jax_logits, cfg, optimizer, mask_id=MASK))
  mine, theirs = (params, optimizer.init(params)), (params, learner.init_opt_state(params))
  for t in range(2):
    key = jax.random.PRNGKey(10 + t)
    *mine, m_mine = update(*mine, params, traj, rewards, weights, key)
    *theirs, m_theirs = learner.update(*theirs, params, traj, rewards, weights, key)
  for a, b in zip(jax.tree.leaves(mine[0]), jax.tree.leaves(theirs[0])):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(float(m_mine["loss"]), float(m_theirs["loss"]), rtol=1e-6)
  assert _max_abs_change(params, mine[0]) > 1e-4
  with pytest.raises(ShapeError, match=r"rewards has shape \(8, 1\); expected \(8,\)"):
    update(*mine, params, traj, rewards[:, None], weights, jax.random.PRNGKey(0))


def _max_abs_change(a, b):
  return max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_cosine_lr_schedule_decays_to_a_tenth_at_the_last_update():
  """rl.lr_schedule="cosine": warmup to the peak, then half a cosine down to 10% of it at update
  steps * num_iterations; "constant" keeps the peak. Checked against the closed form."""
  import math

  import pytest

  from daca_jax.errors import ConfigError
  rollout = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=1.0)
  peak, warm, steps, mu = 2e-4, 4, 10, 3
  total = steps * mu
  for schedule in ("constant", "cosine"):
    cfg = TrainConfig(rollout=rollout, rl=RLConfig(learning_rate=peak, warmup_steps=warm, steps=steps,
                                                   num_iterations=mu, lr_schedule=schedule))
    lr = GRPOLearner(jax_logits, cfg, mask_id=MASK, eos_id=EOS).schedule
    assert float(lr(warm // 2)) == pytest.approx(peak * 0.5, rel=1e-5)  # linear warmup in both
    for t in (warm, 10, 20, total):
      frac = (t - warm) / (total - warm)
      want = peak if schedule == "constant" else peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
      assert float(lr(t)) == pytest.approx(want, rel=1e-4), (schedule, t)
  with pytest.raises(ConfigError, match="rl.lr_schedule"):
    RLConfig(lr_schedule="linear").validate()
