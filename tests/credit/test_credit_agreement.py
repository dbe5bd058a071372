"""Group-agreement masking (credit.drop_agreed): exact mask on hand-made groups, and the learner
multiplies the assigner's weights by it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.credit import CREDIT, group_agreement_mask
from daca_jax.errors import ConfigError
from daca_jax.rl.learner import GRPOLearner
from daca_jax.config.credit import CreditConfig
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig
from tests.fixed_logit_model import jax_logits, make_params

V, MASK, EOS, P = 12, 10, 11, 3


def test_mask_on_hand_made_groups():
  completion = jnp.asarray([[1, 2, 3, 4],
                            [1, 5, 3, 4],  # group 0 differs only at position 1
                            [7, 7, 7, 7],
                            [7, 7, 7, 8]], jnp.int32)  # group 1 differs only at position 3
  cmask = jnp.asarray([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]], jnp.float32)
  got = np.asarray(group_agreement_mask(completion, cmask, 2))
  np.testing.assert_array_equal(got, [[0, 1, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 0, 1]])
  # One group of 4: a position counts as agreed only when all four rows hold the same token.
  np.testing.assert_array_equal(np.asarray(group_agreement_mask(completion, cmask, 4)),
                                [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]])
  np.testing.assert_array_equal(np.asarray(group_agreement_mask(completion, cmask, 1)), cmask)


def test_mask_rejects_a_batch_that_is_not_whole_groups():
  with pytest.raises(ValueError, match="rl.group_size=3"):
    group_agreement_mask(jnp.zeros((4, 2), jnp.int32), jnp.ones((4, 2)), 3)


def test_learner_multiplies_the_assigners_weights():
  rollout = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=1.0)
  rl = RLConfig(credit="dps", likelihood="mean_field", group_size=4)
  params = jax.tree.map(jnp.asarray, make_params(P + 8, V, seed=0, scale=1.0))
  prompts = jnp.asarray(np.random.default_rng(0).integers(0, 9, (8, P)), jnp.int32)
  rewards = jnp.asarray(np.random.default_rng(1).uniform(size=8), jnp.float32)
  plain = GRPOLearner(jax_logits, TrainConfig(rollout=rollout, rl=rl), mask_id=MASK, eos_id=EOS)
  dropping = GRPOLearner(jax_logits, TrainConfig(rollout=rollout, rl=rl, credit=CreditConfig(drop_agreed=True)),
                         mask_id=MASK, eos_id=EOS)
  traj = plain.rollout(params, prompts, jax.random.PRNGKey(0))
  # Make group 1 agree at positions 0-2 so the mask is not trivially all ones.
  tokens = traj.tokens.at[4:8, P:P + 3].set(traj.tokens[4, P:P + 3])
  traj = traj.replace(tokens=tokens)
  w = np.asarray(plain.assign_credit(traj, rewards).weights)
  out = dropping.assign_credit(traj, rewards)
  keep = np.asarray(group_agreement_mask(traj.completion, traj.completion_mask, 4))
  assert keep[4:8, :3].sum() == 0 and keep.sum() > 0
  np.testing.assert_allclose(np.asarray(out.weights), w * keep, rtol=1e-6)
  np.testing.assert_allclose(float(out.metrics["agreed_fraction"]),
                             1 - keep.sum() / np.asarray(traj.completion_mask).sum(), rtol=1e-6)
  assert np.asarray(CREDIT.get("dps")(traj, CreditConfig(), rollout)).shape == w.shape


def test_drop_agreed_must_be_a_bool():
  with pytest.raises(ConfigError, match="credit.drop_agreed"):
    CreditConfig(drop_agreed="yes").validate()


def test_position_value_advantages_by_hand():
  from daca_jax.credit import position_value_advantages

  completion = jnp.asarray([[1, 2, 3], [1, 2, 4], [1, 5, 4], [1, 6, 7]], jnp.int32)  # one group of 4
  cmask = jnp.ones((4, 3), jnp.float32)
  adv = jnp.asarray([0.3, 0.1, -0.1, -0.3], jnp.float32)
  got = np.asarray(position_value_advantages(completion, cmask, adv, 4))
  want = np.asarray([[0.0, 0.2, 0.3],   # pos 0: all agree; pos 1: rows 0,1 share 2 -> (0.3+0.1)/2
                     [0.0, 0.2, 0.0],   # pos 2: rows 1,2 share 4 -> 0
                     [0.0, -0.1, 0.0],
                     [0.0, -0.3, -0.3]])
  np.testing.assert_allclose(got, want, atol=1e-7)
  # Advantages at every position still sum to zero over the group; masked tokens do not count.
  np.testing.assert_allclose(got.sum(0), 0.0, atol=1e-7)
  cmask = cmask.at[3, 2].set(0.0)
  got = np.asarray(position_value_advantages(completion, cmask, adv, 4))
  assert got[3, 2] == 0.0 and np.isclose(got[0, 2], 0.3)


def test_position_value_credit_needs_a_token_level_objective():
  rl = RLConfig(credit="position_value", objective="wd1", likelihood="mean_field", group_size=4)
  with pytest.raises(ConfigError, match="rl.credit='position_value'"):
    GRPOLearner(jax_logits, TrainConfig(rl=rl), mask_id=MASK, eos_id=EOS)


@pytest.mark.parametrize("credit", ["position_value", "contrast", "token_reward"])
def test_token_level_credit_under_a_sequence_objective_is_refused_by_config_validation(credit):
  """Refused when the config is validated (before any model is built or any SFT runs), not only when the
  learner is constructed; MAP's GSPO-style ratios are per sequence too."""
  from daca_jax.config.configure import validate

  for objective, likelihood in (("wd1", "mean_field"), ("map", "stepmerge")):
    rl = RLConfig(credit=credit, objective=objective, likelihood=likelihood, group_size=4)
    with pytest.raises(ConfigError, match=f"rl.credit='{credit}'.*{objective}"):
      validate(TrainConfig(rollout=RolloutConfig(gen_length=32, block_length=32, steps=32), rl=rl))
  validate(TrainConfig(rl=RLConfig(credit=credit, objective="diffu_grpo", likelihood="mean_field", group_size=4)))


def test_position_value_credit_in_the_learner_update():
  rollout = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=1.0)
  rl = RLConfig(credit="position_value", likelihood="mean_field", group_size=4, warmup_steps=0)
  learner = GRPOLearner(jax_logits, TrainConfig(rollout=rollout, rl=rl), mask_id=MASK, eos_id=EOS)
  params = jax.tree.map(jnp.asarray, make_params(P + 8, V, seed=0, scale=1.0))
  prompts = jnp.asarray(np.random.default_rng(0).integers(0, 9, (8, P)), jnp.int32)
  rewards = jnp.asarray(np.random.default_rng(1).uniform(size=8), jnp.float32)
  traj = learner.rollout(params, prompts, jax.random.PRNGKey(0))
  out = learner.assign_credit(traj, rewards)
  from daca_jax.credit import position_value_advantages
  from daca_jax.rl.advantages import group_advantages
  want = position_value_advantages(traj.completion, traj.completion_mask, group_advantages(rewards, 4), 4)
  np.testing.assert_allclose(np.asarray(out.token_advantages), np.asarray(want), rtol=1e-6)
  assert np.abs(np.asarray(want)).sum() > 0
  comp, cm = np.asarray(traj.completion).reshape(2, 4, -1), np.asarray(traj.completion_mask).reshape(2, 4, -1)
  agreed = np.broadcast_to((comp == comp[:, :1]).all(axis=1, keepdims=True), comp.shape)
  np.testing.assert_allclose(float(out.metrics["agreed_fraction"]), (agreed * cm).sum() / cm.sum(), rtol=1e-6)
  new, _, m = learner.update(params, learner.init_opt_state(params), params, traj, rewards,
                             (out.weights, out.token_advantages), jax.random.PRNGKey(1))
  assert np.isfinite(float(m["loss"])) and any(
      not np.allclose(a, b) for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(params)))


def test_position_value_with_dps_weights_on_top():
  from daca_jax.credit import dps_credit, position_value_advantages
  from daca_jax.rl.advantages import group_advantages
  from daca_jax.credit.position_value import PositionValueConfig

  rollout = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=1.0)
  rl = RLConfig(credit="position_value", likelihood="mean_field", group_size=4)
  credit = CreditConfig(position_value=PositionValueConfig(weights="dps"))
  learner = GRPOLearner(jax_logits, TrainConfig(rollout=rollout, rl=rl, credit=credit), mask_id=MASK, eos_id=EOS)
  params = jax.tree.map(jnp.asarray, make_params(P + 8, V, seed=0, scale=1.0))
  prompts = jnp.asarray(np.random.default_rng(0).integers(0, 9, (8, P)), jnp.int32)
  rewards = jnp.asarray(np.random.default_rng(1).uniform(size=8), jnp.float32)
  traj = learner.rollout(params, prompts, jax.random.PRNGKey(0))
  out = learner.assign_credit(traj, rewards)
  pv = np.asarray(position_value_advantages(traj.completion, traj.completion_mask, group_advantages(rewards, 4), 4))
  w = np.asarray(dps_credit(traj, rollout))
  assert not np.allclose(w[w > 0], 1.0)  # DPS weights that actually differ from uniform
  np.testing.assert_allclose(np.asarray(out.weights), w, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(out.token_advantages), pv * w, rtol=1e-6, atol=1e-8)
  # Positive weights rescale a token's position value; they never flip its sign.
  assert np.all(np.asarray(out.token_advantages) * pv >= 0)
  with pytest.raises(ConfigError, match="credit.position_value.weights"):
    PositionValueConfig(weights="dtca").validate()
