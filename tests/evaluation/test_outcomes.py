"""Per-example outcomes (daca_jax.evaluation.outcomes, Task.example_outcomes): they pool to the task's metrics,
and the main job's cached evaluations keep them beside the metrics."""
import gzip
import json

import numpy as np
import pytest

from daca_jax.errors import DataError
from daca_jax.evaluation import outcomes
from daca_jax.run.job_eval import cached_eval
from daca_jax.tasks import text_scan
from daca_jax.tasks.base import Example, Task, make_task


def _sudoku_completions(examples):
  """Solved, half-solved, garbage and over-long completions, cycling."""
  out = []
  for i, ex in enumerate(examples):
    puzzle, solution = ex.meta["puzzle"], ex.meta["solution"]
    kind = i % 4
    if kind == 0:
      out.append(solution)
    elif kind == 1:  # the first half of the blanks right, the rest '1'
      blanks = [j for j, c in enumerate(puzzle) if c == "0"]
      right = set(blanks[:len(blanks) // 2])
      out.append("".join(solution[j] if j in right or c != "0" else "1" for j, c in enumerate(puzzle)))
    elif kind == 2:
      out.append("xyz")
    else:
      out.append(solution + " " * (text_scan.MAX_COMPLETION_CHARS + 1))
  return out


def test_sudoku_outcomes_pool_to_its_metrics_with_puzzles_of_different_blank_counts():
  task = make_task("sudoku4x4", num_blanks=(4, 10), eval_size=40)
  examples = task.eval_examples()[0]
  completions = _sudoku_completions(examples)
  o = task.example_outcomes(completions, examples)
  m = task.metrics(completions, examples)
  assert {k: v.shape for k, v in o.items()} == {k: (40,) for k in (
      "strict_solved", "exact_match", "cell_accuracy", "cells_correct", "cells_blank", "grader_bound_hits")}
  assert m["strict_solved"] == o["strict_solved"].mean() == 10 / 40  # only the solved quarter
  assert m["exact_match"] == o["exact_match"].mean()
  assert m["cell_accuracy"] == o["cells_correct"].sum() / o["cells_blank"].sum()
  assert m["grader_bound_hits"] == o["grader_bound_hits"].sum() == 10
  blanks = [ex.meta["puzzle"].count("0") for ex in examples]
  assert o["cells_blank"].tolist() == blanks and len(set(blanks)) > 1
  # With unequal blank counts the per-puzzle fractions' mean is not the pooled cell accuracy.
  assert o["cell_accuracy"].mean() != pytest.approx(m["cell_accuracy"])
  # Solved: every blank right; garbage and over-long (a grader bound hit): none.
  assert (o["cells_correct"][0], o["cells_correct"][2], o["cells_correct"][3]) == (blanks[0], 0, 0)
  assert o["cells_correct"][1] >= blanks[1] // 2 and o["cell_accuracy"][0] == 1.0


def test_countdown_outcomes_pool_to_its_metrics():
  task = make_task("countdown", eval_size=12)
  examples = task.eval_examples()[0]
  completions = [ex.target if i % 3 == 0 else ("1+1" if i % 3 == 1 else "") for i, ex in enumerate(examples)]
  o = task.example_outcomes(completions, examples)
  m = task.metrics(completions, examples)
  assert m["accuracy"] == o["accuracy"].mean() == 4 / 12
  assert m["well_formed"] == o["well_formed"].mean()
  assert m["mean_reward"] == pytest.approx(o["mean_reward"].mean(), rel=1e-6)
  assert m["grader_bound_hits"] == o["grader_bound_hits"].sum() == 0


class _Toy(Task):
  """A task whose rate is 'the completion equals the target' and whose count is empty completions."""

  name = "toy"
  prompt_len, min_gen_length = 4, 2

  def train_examples(self, num, seed):
    return []

  def eval_examples(self):
    return [], "none"

  def reward(self, completions, examples):
    return np.asarray([c == ex.target for c, ex in zip(completions, examples)], np.float32)

  def metrics(self, completions, examples):
    return {"accuracy": float(np.mean([c == ex.target for c, ex in zip(completions, examples)])),
            "grader_bound_hits": float(sum(c == "" for c in completions)), "num_examples": float(len(examples))}


def test_the_default_outcomes_grade_each_example_alone():
  task = _Toy()
  examples = [Example(prompt=f"p{i}", target="a") for i in range(5)]
  completions = ["a", "b", "", "a", "a"]
  o = task.example_outcomes(completions, examples)
  assert o["accuracy"].tolist() == [1, 0, 0, 1, 1] and o["grader_bound_hits"].tolist() == [0, 0, 1, 0, 0]
  assert o["accuracy"].mean() == task.metrics(completions, examples)["accuracy"]


def test_cached_eval_writes_outcomes_that_pool_to_the_cached_metrics_and_rebuilds_missing_ones(tmp_path):
  task = make_task("sudoku4x4", eval_size=12)
  examples = task.eval_examples()[0]
  completions = _sudoku_completions(examples)
  path = tmp_path / "eval_after.json"
  calls = []

  def run():
    calls.append(1)
    return task.metrics(completions, examples), completions

  metrics, hit = cached_eval(path, {"f": 1}, run, examples, log=lambda *_: None, task=task)
  assert not hit and task.num_bound_hits == 3  # metrics counted the bound hits once; outcomes did not again
  file = tmp_path / "eval_after.outcomes.jsonl"
  rows = [json.loads(line) for line in file.read_text().splitlines()]
  assert [r["index"] for r in rows] == list(range(12))
  assert [r["key"] for r in rows] == [outcomes.example_key(ex) for ex in examples]
  cached = json.loads(path.read_text())["metrics"]
  solved = outcomes.read_outcomes(file, "strict_solved")
  assert sum(solved.values()) / len(solved) == cached["strict_solved"] == metrics["strict_solved"]
  assert (sum(r["cells_correct"] for r in rows) / sum(r["cells_blank"] for r in rows)) == cached["cell_accuracy"]
  # A cache written before outcomes were kept: they are regraded from its generations, not decoded.
  file.unlink()
  assert cached_eval(path, {"f": 1}, run, examples, log=lambda *_: None, task=task) == (metrics, True)
  assert len(calls) == 1 and [json.loads(line) for line in file.read_text().splitlines()] == rows


def test_outcome_keys_are_stable_and_damaged_files_are_named(tmp_path):
  ex = Example(prompt="0123", target="x")
  assert outcomes.example_key(ex) == outcomes.example_key(Example(prompt="0123", target="y")) != \
      outcomes.example_key(Example(prompt="0124", target="x"))
  assert outcomes.outcomes_path(tmp_path / "eval_before_L128.json").name == "eval_before_L128.outcomes.jsonl"
  assert outcomes.outcomes_path(tmp_path / "gen32.jsonl").name == "gen32.outcomes.jsonl"
  packed = tmp_path / "y.outcomes.jsonl.gz"
  packed.write_bytes(gzip.compress(b'{"index": 0, "key": "a", "strict_solved": 1.0}\n'))
  assert outcomes.read_outcomes(packed, "strict_solved") == {"a": 1.0}
  bad = tmp_path / "x.outcomes.jsonl"
  bad.write_text('{"key": "a", "strict_solved": 1}\n{"key": "a", "strict_solved": 0}\n')
  with pytest.raises(DataError, match="line 2 repeats example key 'a'"):
    outcomes.read_outcomes(bad, "strict_solved")
  with pytest.raises(DataError, match="line 1 has no 'key' or no 'accuracy'"):
    outcomes.read_outcomes(bad, "accuracy")
