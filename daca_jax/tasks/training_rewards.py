"""Which reward RL trains on (config field ``task.reward``), and whether each completion is correct.

``""`` (default): the task's own graded reward (:meth:`Task.reward`), the one evaluation uses;
a completion is correct iff its reward is >= 1 (every task scores correctness 1 plus format terms
below 1). ``"d1"``: d1's training rewards as released (:mod:`daca_jax.tasks.d1_rewards`, commit
837888f); ``"d1_dotall"``: the same with d1's later ``re.DOTALL`` format patterns (commit 4bab4b9).
d1's rewards reach 4 on GSM8K, so correctness comes from each reward's own correctness term, and
the trainer's ``accuracy`` keeps meaning "correct" (:func:`training_rewards` returns both).

Evaluation always uses the task's own grader; ``task.reward`` changes the training signal only.
"""
from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

import numpy as np

from daca_jax.errors import ConfigError
from daca_jax.registry import Registry
from daca_jax.tasks import d1_rewards, text_scan
from daca_jax.tasks.base import Example, Task

# reward name -> {task name -> per-example reward}; "" (the task's own reward) is not an entry.
REWARDS: Registry[Mapping[str, d1_rewards.ExampleReward]] = Registry("training reward", "task.reward")
REWARDS.register("d1")(d1_rewards.D1_REWARDS)
REWARDS.register("d1_dotall")(d1_rewards.D1_DOTALL_REWARDS)


class GradedRewards(NamedTuple):
  """Rewards of one batch of completions.

  Attributes:
    reward: float32 ``[N]``, what the update trains on.
    correct: bool ``[N]``, whether each completion's answer is right (the trainer's ``accuracy``).
  """

  reward: np.ndarray
  correct: np.ndarray


def check_reward(reward: str, task_name: str) -> None:
  """Checks that ``task.reward=reward`` is defined for ``task.name=task_name``.

  Raises:
    ConfigError: an unknown reward name (listing the names), or a reward with no function for this
      task (listing the tasks it has).
  """
  if reward == "":
    return
  per_task = REWARDS.get(reward)
  if task_name not in per_task:
    raise ConfigError("task.reward", reward, f"'' (the task's own reward) for task.name={task_name!r}: "
                      f"{reward!r} is defined for {sorted(per_task)} only")


def training_rewards(reward: str, task: Task, completions: Sequence[str],
                     examples: Sequence[Example]) -> GradedRewards:
  """Rewards and correctness of ``completions[i]`` for ``examples[i]`` under ``task.reward=reward``.

  Completions longer than :data:`~daca_jax.tasks.text_scan.MAX_COMPLETION_CHARS` get reward 0 and
  count in ``task.num_bound_hits`` (the task's own reward counts its bound hits itself).

  Raises:
    ConfigError: as :func:`check_reward`.
    ValueError: ``completions`` and ``examples`` differ in length.
  """
  if len(completions) != len(examples):
    raise ValueError(f"got {len(completions)} completions for {len(examples)} examples")
  if reward == "":
    rewards = np.asarray(task.reward(completions, examples), np.float32).reshape(len(examples))
    return GradedRewards(rewards, rewards >= 1.0)
  check_reward(reward, task.name)
  fn = REWARDS.get(reward)[task.name]
  scores, correct = np.zeros(len(examples), np.float32), np.zeros(len(examples), bool)
  for i, (completion, example) in enumerate(zip(completions, examples)):
    if text_scan.over_limit(completion):
      task.num_bound_hits += 1
      continue
    scores[i], correct[i] = fn(completion, example)
  return GradedRewards(scores, correct)
