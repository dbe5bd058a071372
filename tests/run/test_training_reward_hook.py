"""The RL loop trains on ``task.reward``'s rewards and logs ``accuracy`` as the fraction correct."""
import numpy as np

from configs import sudoku_tiny
from daca_jax.config.configure import train_config_from_dict
from daca_jax.run import pipeline, rl_loop
from daca_jax.run.metrics import read_metrics
from daca_jax.tasks import d1_rewards
from daca_jax.tasks.training_rewards import GradedRewards, training_rewards


def test_rl_trains_on_the_configured_reward_and_logs_its_correctness(tmp_path, monkeypatch):
  seen = []

  def spy(reward, task, completions, examples):
    got = training_rewards(reward, task, completions, examples)
    # d1's Sudoku reward, row by row (the trainer must use this one, not the task's own)
    want = [d1_rewards.D1_REWARDS["sudoku4x4"](c, e)[0] for c, e in zip(completions, examples)]
    np.testing.assert_allclose(got.reward, want, rtol=1e-6)
    # a correctness that differs from "reward >= 1": the logged accuracy must follow it
    correct = np.arange(len(completions)) % 4 == 0
    seen.append((got.reward, correct))
    return GradedRewards(got.reward + 5.0, correct)

  monkeypatch.setattr(rl_loop, "training_rewards", spy)
  c = sudoku_tiny.get_config("smoke")
  c.task.reward = "d1"
  c.rl.steps = 2
  c.sft.steps = 0
  c.task.num_eval_examples = 4
  cfg = train_config_from_dict(c)
  pipeline.run_main_job(cfg, tmp_path, show_progress=False, log=lambda *a, **k: None)
  records = read_metrics(tmp_path / "metrics.jsonl")
  assert len(records) == len(seen) == 2
  for record, (reward, correct) in zip(records, seen):
    assert record["accuracy"] == np.mean(correct) == 0.25
    assert record["reward_mean"] == np.float32(reward + 5.0).mean()  # the update's rewards, not >= 1
