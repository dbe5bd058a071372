"""MATH500 competition math (``math500``): ``\\boxed{}`` / answer-tag extraction, math-verify grading.

Data: ``<data_dir>/math500/test.json`` (500 items) and ``math_train.json`` (8523 MATH training items),
ant-research/Drift JSON arrays of ``{"question", "ground_truth_answer", ...}``. Extraction:
:func:`daca_jax.tasks.math_answers.extract_math_answer`; equivalence: math-verify, run in a killable
worker process with per-item time limits (:class:`daca_jax.tasks.math_answers.MathVerifier`).
Rewards and prompt styles: :mod:`daca_jax.tasks.qa_base`. The files hold no worked solutions, so SFT
targets only state the boxed gold answer.
"""
from __future__ import annotations

from typing import Sequence

from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks.base import TASKS, Example
from daca_jax.tasks.math_answers import MathVerifier, extract_math_answer
from daca_jax.tasks.qa_base import ReasoningQATask


@TASKS.register("math500")
class Math500Task(ReasoningQATask):
  """MATH500.

  Args (beyond :class:`~daca_jax.tasks.qa_base.ReasoningQATask`'s):
    verify_timeout_s: wall-clock limit per graded answer (seconds); a slower answer counts as wrong.
  """

  name = "math500"
  EVAL_FILE = "math500/test.json"
  TRAIN_FILE = "math500/math_train.json"
  DESCRIPTION = "MATH500 (ant-research/Drift data/MATH500.json)"

  def __init__(self, *args, verify_timeout_s: float = 10.0, **kwargs):
    super().__init__(*args, **kwargs)
    if isinstance(verify_timeout_s, bool) or not isinstance(verify_timeout_s, (int, float)) or not (
        verify_timeout_s > 0):
      raise ConfigError("task.options.verify_timeout_s", verify_timeout_s, "a number of seconds > 0")
    self.verifier = MathVerifier(timeout_s=float(verify_timeout_s))

  def make_example(self, record: dict, where: str) -> Example | None:
    question, gold = record.get("question"), record.get("ground_truth_answer")
    if not isinstance(question, str) or not isinstance(gold, str):
      raise DataError(f"{where}: expected string fields 'question' and 'ground_truth_answer', got "
                      f"{sorted(record)}")
    if not gold.strip():
      return None  # two MATH training records have an empty answer
    boxed = f"\\boxed{{{gold}}}"
    target = boxed if self.prompt_style == "plain" else fmt.reasoning_target(
        f"The final answer is {boxed}.", boxed)
    return Example(prompt=self.format_prompt(question), target=target, meta={"gold": gold})

  def answer_only_target(self, example: Example) -> str:
    boxed = f"\\boxed{{{example.meta['gold']}}}"
    return boxed if self.prompt_style == "plain" else fmt.reasoning_target("", boxed)

  def correct(self, completions: Sequence[str], examples: Sequence[Example]) -> list[bool]:
    """math-verify equivalence of each extracted answer with the gold answer."""
    answers = [extract_math_answer(c, self.prompt_style) for c in completions]
    return self.verifier.equal([(ex.meta["gold"], a) for ex, a in zip(examples, answers)])
