"""Task-defined token rewards and the token_reward (oracle) credit."""
import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.credit import CREDIT, CreditInputs, token_group_advantages
from daca_jax.diffusion import Trajectory
from daca_jax.errors import ConfigError
from daca_jax.models import init_model, make_logits_fn, tiny_config
from daca_jax.rl.learner import GRPOLearner
from daca_jax.contracts import PolicyBatch
from daca_jax.rl.methods.diffu_grpo import diffu_grpo_loss
from daca_jax.tasks.sudoku import Sudoku4x4Task, cell_reward
from daca_jax.config.credit import CreditConfig
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig


def test_token_group_advantages_against_numpy():
  rng = np.random.default_rng(0)
  r = rng.integers(0, 2, (6, 5)).astype(np.float32)
  m = (rng.random((6, 5)) > 0.3).astype(np.float32)
  adv = np.asarray(token_group_advantages(jnp.asarray(r), jnp.asarray(m), 3))
  expect = np.zeros_like(r)
  for g in range(2):
    rows = slice(3 * g, 3 * g + 3)
    for i in range(5):
      sel = m[rows, i] > 0
      if sel.any():
        expect[rows, i] = (r[rows, i] - r[rows, i][sel].mean()) * m[rows, i]
  np.testing.assert_allclose(adv, expect, atol=1e-6)


def test_sudoku_token_rewards_decompose_d1s_reward():
  task = Sudoku4x4Task(data_dir=None)
  examples = task.train_examples(40, seed=3)
  rng = np.random.default_rng(1)
  tok = task.tokenizer
  ids = np.full((40, 20), tok.eos_id, np.int32)
  for i, ex in enumerate(examples):
    text = "".join(c if rng.random() < 0.7 else str(rng.integers(1, 5)) for c in ex.target)
    text = " " * int(rng.integers(0, 2)) + text[:int(rng.integers(10, 17))]
    ids[i, :len(text)] = tok.encode(text)
  rewards, mask = task.token_rewards(ids, examples)
  completions = task.decode_completions(ids)
  for i, ex in enumerate(examples):
    blanks = ex.meta["puzzle"].count("0")
    assert rewards[i].sum() / blanks == pytest.approx(cell_reward(completions[i], ex.meta["puzzle"],
                                                                  ex.meta["solution"]))
    assert mask[i].sum() <= blanks and set(np.flatnonzero(rewards[i])) <= set(np.flatnonzero(mask[i]))
  # givens carry no token reward
  ex = examples[0]
  given_cells = [c for c, d in enumerate(ex.meta["puzzle"]) if d != "0"]
  offset = 0 if ids[0, 0] != ord(" ") else 1
  assert all(mask[0, offset + c] == 0 for c in given_cells)


def test_token_reward_credit_and_loss():
  b, length = 4, 3
  traj = Trajectory(tokens=jnp.zeros((b, 1 + length), jnp.int32), completion_mask=jnp.ones((b, length)),
                    commit_step=jnp.zeros((b, length), jnp.int32), commit_conf=jnp.zeros((b, length)),
                    prompt_len=1)
  tok_r = jnp.asarray([[1, 0, 1], [0, 0, 1], [1, 1, 0], [1, 0, 0]], jnp.float32)
  mask = jnp.asarray([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]], jnp.float32)
  rollout = RolloutConfig(gen_length=length, block_length=length, steps=length)  # the trajectory's geometry
  out = CREDIT.get("token_reward").assign(traj, CreditConfig(), rollout, CreditInputs(
      token_rewards=tok_r, token_reward_mask=mask, group_size=2))
  np.testing.assert_allclose(out.token_advantages, [[0.5, 0, 0], [-0.5, 0, 0], [0, 0.5, 0], [0, -0.5, 0]])
  np.testing.assert_allclose(out.weights, mask)
  # diffu_grpo uses the token advantages in place of A_b * w: at ratio 1 the loss is -mean(adv)
  logp = jnp.log(jnp.full((b, length), 0.5))
  batch = PolicyBatch(logp_old=logp, logp_ref=logp, advantages=jnp.asarray([9.0, 9.0, 9.0, 9.0]),
                      weights=out.weights, mask=traj.completion_mask, token_advantages=out.token_advantages)
  loss, _ = diffu_grpo_loss(logp, batch, beta=0.0)
  assert float(loss) == pytest.approx(-float(jnp.sum(out.token_advantages)) / (b * length))


def test_token_reward_credit_needs_a_token_level_objective():
  gd, _ = init_model(tiny_config())
  cfg = TrainConfig(rl=dataclasses.replace(RLConfig(), objective="wd1", credit="token_reward"))
  with pytest.raises(ConfigError, match="rl.credit='token_reward'"):
    GRPOLearner(make_logits_fn(gd), cfg, mask_id=257, eos_id=258)
