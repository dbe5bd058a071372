"""The advantage registry (``rl.advantage``): estimators vs numpy, defaults per objective, the config
field's errors, the gdpo alias, and the learner computing the advantages once per rollout batch."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.config import configure
from daca_jax.errors import ConfigError
from daca_jax.registry import Registry
from daca_jax.rl.advantages import ADVANTAGES, advantage_name
from daca_jax.rl.learner import GRPOLearner
from daca_jax.rl.methods import OBJECTIVES
from daca_jax.config.credit import CreditConfig
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.stratified import StratifiedConfig
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig
from tests.fixed_logit_model import jax_logits, make_params

G = 4


def _rewards(seed=0, b=12):
  return np.random.default_rng(seed).uniform(size=b).astype(np.float32)


def test_estimators_against_numpy():
  r = _rewards()
  kl = np.random.default_rng(1).normal(size=12).astype(np.float32)
  g = r.reshape(-1, G)
  want = {
      "group_mean": (g - g.mean(1, keepdims=True)).reshape(-1),
      "group_std": ((g - g.mean(1, keepdims=True)) / (g.std(1, keepdims=True) + 1e-4)).reshape(-1),
      "batch_whiten": (r - r.mean()) / (r.std() + 1e-8),
      "reinforce_pp": ((r - 0.3 * kl) - (r - 0.3 * kl).mean()) / ((r - 0.3 * kl).std() + 1e-8),
      "rloo": (g - (g.sum(1, keepdims=True) - g) / (G - 1)).reshape(-1),  # ESPO's leave-one-out baseline
  }
  assert sorted(want) == ADVANTAGES.names()
  for name, expect in want.items():
    got = np.asarray(ADVANTAGES.get(name)(jnp.asarray(r), G, jnp.asarray(kl), 0.3))
    np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-6, err_msg=name)
  assert ADVANTAGES.get("reinforce_pp").needs_kl
  assert not any(ADVANTAGES.get(n).needs_kl for n in ("group_mean", "group_std", "batch_whiten", "rloo"))


@pytest.mark.parametrize("name", ["group_mean", "group_std", "batch_whiten", "rloo"])
def test_estimators_reject_a_ragged_batch(name):
  with pytest.raises(ValueError, match="rl.group_size=4"):
    ADVANTAGES.get(name)(jnp.zeros(10), G)


def test_default_estimator_per_objective():
  assert advantage_name("diffu_grpo") == "group_mean"  # d1: r - mean, no std division
  assert advantage_name("diffu_grpo", normalize_adv_std=True) == "group_std"
  assert advantage_name("reinforce_pp") == "reinforce_pp"
  assert advantage_name("reinforce_pp", normalize_adv_std=True) == "reinforce_pp"
  assert advantage_name("gspo", "batch_whiten") == "batch_whiten"
  for objective in OBJECTIVES:
    assert advantage_name(objective) in ADVANTAGES


def test_unknown_advantage_is_one_config_error():
  with pytest.raises(ConfigError, match=r"rl\.advantage='zscore'.*\['batch_whiten', 'group_mean', 'group_std', "
                                        r"'reinforce_pp', 'rloo'\]"):
    configure.validate(TrainConfig(rl=RLConfig(advantage="zscore")))
  with pytest.raises(ConfigError, match=r"rl\.advantage=1 .*a string"):
    RLConfig(advantage=1).validate()
  with pytest.raises(ConfigError, match=r"rl\.normalize_adv_std=True.*rl\.advantage='batch_whiten'"):
    RLConfig(advantage="batch_whiten", normalize_adv_std=True).validate()
  RLConfig(advantage="group_std", normalize_adv_std=True).validate()


def test_config_dict_selects_the_estimator():
  from configs import sudoku_tiny

  c = sudoku_tiny.get_config("smoke")
  assert c.rl.advantage == "group_std"  # the main job's recipe (configs/sudoku_tiny.py)
  assert configure.train_config_from_dict(c).rl.advantage == "group_std"
  c.rl.advantage = "batch_whiten"
  assert configure.train_config_from_dict(c).rl.advantage == "batch_whiten"


def test_gdpo_is_an_explicit_alias_of_gspo():
  assert OBJECTIVES.get("gdpo") is OBJECTIVES.get("gspo")
  assert OBJECTIVES.aliases() == {"gdpo": "gspo"}
  reg = Registry("thing", "x.y")
  reg.register("a")(1)
  with pytest.raises(ValueError, match="'b' is not registered"):
    reg.alias("c", "b")
  with pytest.raises(ValueError, match="already registered"):
    reg.alias("a", "a")


def test_a_temporary_registration_is_gone_after_its_block_even_on_error():
  reg = Registry("thing", "x.y")
  reg.register("a")(1)
  with reg.registered("b", 2):
    assert reg.get("b") == 2 and reg.names() == ["a", "b"]
  assert reg.names() == ["a"]
  with pytest.raises(RuntimeError), reg.registered("b", 3):
    raise RuntimeError
  assert "b" not in reg
  with pytest.raises(ValueError, match="already registered"), reg.registered("a", 4):
    pass
  assert reg.get("a") == 1


V, MASK, EOS, P = 12, 10, 11, 3


def _learner(advantage="", objective="diffu_grpo", mu=3):
  rollout = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=1.0)
  cfg = TrainConfig(rollout=rollout, credit=CreditConfig(), likelihood=LikelihoodConfig(stratified=StratifiedConfig(num_strata=2)),
                    rl=RLConfig(objective=objective, credit="dps", likelihood="stratified", num_iterations=mu,
                                group_size=G, beta=0.1, learning_rate=0.05, warmup_steps=0, advantage=advantage))
  params = jax.tree.map(jnp.asarray, make_params(P + 8, V, seed=0, scale=1.0))
  learner = GRPOLearner(jax_logits, cfg, mask_id=MASK, eos_id=EOS)
  prompts = jnp.asarray(np.random.default_rng(0).integers(0, 9, (8, P)), jnp.int32)
  traj = learner.rollout(params, prompts, jax.random.PRNGKey(0))
  return learner, params, traj, jnp.asarray(_rewards(1, 8))


def test_learner_computes_the_advantages_once_per_batch():
  """One estimator call for μ = 3 updates and the metrics (the old learner called group_advantages
  in every inner update's gradient and again for the metrics, and in the credit pass). The counting
  estimator is registered under its own name and configured as rl.advantage, as a user's would be."""
  from daca_jax.rl.advantages import register_advantage
  calls = []
  group_mean = ADVANTAGES.get("group_mean")

  @register_advantage("_test_counted")
  def counted(r, g, kl=None, beta=0.0):
    calls.append(1)
    return group_mean.fn(r, g, kl, beta)

  try:
    learner, params, traj, rewards = _learner("_test_counted")
    credit = learner.assign_credit(traj, rewards)  # dps reads no advantages
    assert not calls
    _, _, m = learner.update(params, learner.init_opt_state(params), params, traj, rewards, credit.weights,
                             jax.random.PRNGKey(1))
  finally:
    ADVANTAGES._entries.pop("_test_counted", None)
  assert len(calls) == 1
  want = np.asarray(rewards).reshape(-1, G)
  np.testing.assert_allclose(float(m["adv_std"]), np.std(want - want.mean(1, keepdims=True)), rtol=1e-5)


def test_the_configured_estimator_reaches_the_update():
  """rl.advantage=batch_whiten: the objective sees whitened rewards, not group-centred ones."""
  base, params, traj, rewards = _learner(mu=1)
  whiten, *_ = _learner("batch_whiten", mu=1)
  w = base.credit_weights(traj)
  key = jax.random.PRNGKey(1)
  base_grad, whiten_grad = jax.jit(base.objective_grad), jax.jit(whiten.objective_grad)  # eager: minutes
  g0, _ = base_grad(params, params, traj, rewards, w, key)
  g1, _ = whiten_grad(params, params, traj, rewards, w, key)
  g2, _ = base_grad(params, params, traj, rewards, w, key, advantages=ADVANTAGES.get("batch_whiten")(rewards, G))
  for a, b, c in zip(jax.tree.leaves(g0), jax.tree.leaves(g1), jax.tree.leaves(g2)):
    np.testing.assert_allclose(b, c, rtol=1e-6, atol=1e-9)
  assert max(float(jnp.abs(a - b).max()) for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1))) > 1e-6
