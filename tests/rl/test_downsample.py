"""Rollout down-sampling (PODS): the max-variance subset against exhaustive search, row gathering, the
config checks, and a main-job run that samples more than it trains on."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import sudoku_tiny
from daca_jax.config.configure import train_config_from_dict
from daca_jax.contracts import Trajectory
from daca_jax.errors import ConfigError
from daca_jax.rl.downsample import (DOWNSAMPLE_RULES, max_variance_subset, random_subset, select_rows,
                                    take_rows)
from daca_jax.run.metrics import read_metrics
from daca_jax.run.pipeline import run_main_job
from daca_jax.config.rl import RLConfig


def _best_variance(row: np.ndarray, m: int) -> float:
  return max(np.var(row[list(c)]) for c in itertools.combinations(range(len(row)), m))


@pytest.mark.parametrize("n,m", [(4, 2), (6, 3), (7, 4), (8, 1), (5, 5)])
def test_max_variance_subset_matches_exhaustive_search(n, m):
  rng = np.random.default_rng(n * 10 + m)
  # continuous rewards, rewards on a coarse grid (ties), binary rewards and a constant group
  rewards = np.concatenate([rng.uniform(size=(3, n)), rng.integers(0, 4, size=(3, n)) / 3.0,
                            rng.integers(0, 2, size=(3, n)), np.full((1, n), 0.5)]).astype(np.float32)
  cols = np.asarray(max_variance_subset(jnp.asarray(rewards), m))
  assert cols.shape == (len(rewards), m) and cols.dtype == np.int32
  for row, c in zip(rewards, cols):
    assert len(set(c.tolist())) == m and c.min() >= 0 and c.max() < n
    np.testing.assert_allclose(np.var(row[c]), _best_variance(row, m), rtol=1e-5, atol=1e-7)


def test_binary_rewards_keep_both_outcomes_balanced():
  # PODS on 0/1 rewards: as many of each outcome as the group has, up to m/2
  rewards = jnp.asarray([[1, 1, 1, 1, 1, 0, 1, 1], [0, 1, 0, 1, 0, 1, 0, 0]], jnp.float32)
  cols = np.asarray(max_variance_subset(rewards, 4))
  kept = np.take_along_axis(np.asarray(rewards), cols, axis=-1).sum(-1)
  assert kept.tolist() == [3.0, 2.0]


def test_select_rows_stays_in_each_group_and_random_is_a_subset():
  rewards = jnp.asarray(np.random.default_rng(0).uniform(size=12), jnp.float32)  # P=3, n=4
  for rule in DOWNSAMPLE_RULES:
    rows = np.asarray(select_rows(rewards, 4, 2, rule, jax.random.PRNGKey(1)))
    assert rows.shape == (6,)
    assert (rows // 4).tolist() == [0, 0, 1, 1, 2, 2]  # groups of m adjacent, each from its own prompt
    assert len(set(rows.tolist())) == 6
  a = np.asarray(random_subset(jax.random.PRNGKey(0), 64, 8, 4))
  b = np.asarray(random_subset(jax.random.PRNGKey(1), 64, 8, 4))
  assert (a != b).any()
  assert np.bincount(a.ravel(), minlength=8).min() > 10  # every column gets picked
  with pytest.raises(ValueError, match="rl.downsample='best'"):
    select_rows(rewards, 4, 2, "best")
  with pytest.raises(ValueError, match="needs a key"):
    select_rows(rewards, 4, 2, "random")
  with pytest.raises(ValueError, match="m=5"):
    select_rows(rewards, 4, 5, "max_variance")
  with pytest.raises(ValueError, match=r"\[P \* n\]"):
    select_rows(rewards[:10], 4, 2, "max_variance")


def test_take_rows_gathers_every_batch_axis():
  b, p, length, s, d = 6, 3, 5, 4, 2
  ar = lambda *shape: jnp.arange(np.prod(shape), dtype=jnp.float32).reshape(shape)
  traj = Trajectory(tokens=ar(b, p + length).astype(jnp.int32), completion_mask=ar(b, length),
                    commit_step=ar(b, length).astype(jnp.int32), commit_conf=ar(b, length),
                    step_conf=ar(s, b, length), step_entropy=None, commit_hidden=ar(b, length, d),
                    prompt_len=p, num_model_calls=s, model_calls=jnp.int32(s), finished=jnp.bool_(True))
  rows = jnp.asarray([4, 1, 1], jnp.int32)
  out = take_rows(traj, rows)
  np.testing.assert_array_equal(out.tokens, np.asarray(traj.tokens)[[4, 1, 1]])
  np.testing.assert_array_equal(out.commit_conf, np.asarray(traj.commit_conf)[[4, 1, 1]])
  np.testing.assert_array_equal(out.step_conf, np.asarray(traj.step_conf)[:, [4, 1, 1]])
  np.testing.assert_array_equal(out.commit_hidden, np.asarray(traj.commit_hidden)[[4, 1, 1]])
  assert out.step_entropy is None and out.prompt_len == p and int(out.model_calls) == s


def test_config_checks_name_the_field():
  assert RLConfig(group_size=4, sample_group_size=8).validate().sample_group_size == 8
  assert RLConfig(group_size=4, sample_group_size=4).validate().sample_group_size == 4
  with pytest.raises(ConfigError, match=r"rl.sample_group_size=3.*>= rl.group_size=4"):
    RLConfig(group_size=4, sample_group_size=3).validate()
  with pytest.raises(ConfigError, match=r"rl.sample_group_size=True"):
    RLConfig(group_size=4, sample_group_size=True).validate()
  with pytest.raises(ConfigError, match=r"rl.downsample='top'.*max_variance"):
    RLConfig(downsample="top").validate()


def test_main_job_samples_n_and_trains_on_g(tmp_path):
  c = sudoku_tiny.get_config("smoke")
  c.rl.steps, c.rl.prompts_per_step, c.rl.group_size, c.rl.sample_group_size = 2, 2, 4, 8
  c.sft.steps, c.task.num_eval_examples, c.eval.batch_size = 10, 8, 8
  run_main_job(train_config_from_dict(c), tmp_path, show_progress=False, log=lambda *a, **k: None)
  records = read_metrics(tmp_path / "metrics.jsonl")
  assert [r["step"] for r in records] == [1, 2]
  for r in records:
    assert np.isfinite(r["loss"]) and np.isfinite(r["grad_norm"])
    assert 0.0 <= r["kept_reward_mean"] <= 1.0 and 0.0 <= r["reward_mean"] <= 1.0
  plain = tmp_path / "plain"
  c.rl.sample_group_size = 0
  run_main_job(train_config_from_dict(c), plain, show_progress=False, log=lambda *a, **k: None)
  assert all("kept_reward_mean" not in r for r in read_metrics(plain / "metrics.jsonl"))
