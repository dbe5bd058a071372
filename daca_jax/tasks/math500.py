"""MATH500 competition math (``math500``): ``\\boxed{}`` / answer-tag extraction, math-verify grading.

Data: ``<data_dir>/math500/test.json`` (500 items) and ``math_train.json`` (8523 MATH training items),
ant-research/Drift JSON arrays of ``{"question", "ground_truth_answer", ...}``.

Prompts: ``"chat"`` is d1's MATH500 evaluation prompt (:data:`SYSTEM_PROMPT`, d1
``eval/math500.py``); ``"d1_train"`` is d1's MATH training prompt
(:func:`daca_jax.tasks.d1_train_prompts.math_message`); ``"plain"`` is the bare question.

Grading: :func:`daca_jax.tasks.math_answers.extract_math_answer` (d1's ``parse_math_answers``: the
last ``\\boxed{}``, else the answer span); equivalence: math-verify, run in a killable worker process
with a per-item time limit (:class:`daca_jax.tasks.math_answers.MathVerifier`; an item that runs out
of time scores 0 and is a grader bound hit). The math_answers module docstring lists every rule that
differs from d1's parser and why. Rewards and format terms: :mod:`daca_jax.tasks.qa_base`. The files
hold no worked solutions, so SFT targets only state the boxed gold answer.
"""
from __future__ import annotations

import os
from typing import Sequence

from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks import d1_train_prompts
from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks import text_scan
from daca_jax.tasks.base import TASKS, Example
from daca_jax.tasks.math_answers import MathVerifier, extract_math_answer
from daca_jax.tasks.qa_base import ReasoningQATask
from daca_jax.tasks.tokenizer import Tokenizer

# d1's MATH500 evaluation system prompt (dllm-reasoning/d1 eval/math500.py, MATH500_SYSTEM_PROMPT),
# verbatim, the stray '" ' after the closing tag included.
SYSTEM_PROMPT = (
    "You are a math expert. You will be given a question to solve. Solve it step by step. Wrap the "
    "final answer in a \\boxed{}.\nRespond in the following format:\n<reasoning>\nYour reasoning "
    "here\n</reasoning>\n<answer>\n\\boxed{...}\n</answer>\" \n")


@TASKS.register("math500")
class Math500Task(ReasoningQATask):
  """MATH500.

  Args (beyond :class:`~daca_jax.tasks.qa_base.ReasoningQATask`'s):
    verify_timeout_s: CPU seconds per graded answer (in the verification worker); a slower answer
      counts as wrong and as a grader bound hit. The default (0.8 s, killed at 0.95 s when native code
      ignores the limit) keeps every completion's grading within 1 s of CPU; math-verify itself needs
      ~10-100 ms for a MATH answer.
  """

  name = "math500"
  EVAL_FILE = "math500/test.json"
  TRAIN_FILE = "math500/math_train.json"
  DESCRIPTION = "MATH500 (ant-research/Drift data/MATH500.json)"
  SYSTEM_PROMPT = SYSTEM_PROMPT
  OPTIONS = {**ReasoningQATask.OPTIONS, "verify_timeout_s": 0.8}

  def __init__(self, data_dir: str | os.PathLike[str] | None = None, eval_path: str = "",
               prompt_style: str = "chat", format_weight: float = 0.1, prompt_len: int = 0,
               verify_timeout_s: float = 0.8, tokenizer: Tokenizer | None = None):
    super().__init__(data_dir=data_dir, eval_path=eval_path, prompt_style=prompt_style,
                     format_weight=format_weight, prompt_len=prompt_len, tokenizer=tokenizer)
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
    target = boxed if self.prompt_style == "plain" else fmt.reasoning_answer_target(
        self.prompt_style, f"The final answer is {boxed}.", boxed)
    return Example(prompt=self.format_prompt(question), target=target, meta={"gold": gold})

  def answer_only_target(self, example: Example) -> str:
    boxed = f"\\boxed{{{example.meta['gold']}}}"
    return boxed if self.prompt_style == "plain" else fmt.reasoning_answer_target(self.prompt_style, "", boxed)

  def d1_train_message(self, question: str) -> str:
    return d1_train_prompts.math_message(question)

  def grade(self, completions: Sequence[str],
            examples: Sequence[Example]) -> tuple[list[bool], list[bool]]:
    """math-verify equivalence of each extracted answer with the gold answer; over-long completions
    and verifications that ran out of time are bound hits."""
    answers = [extract_math_answer(c, self.prompt_style) for c in completions]
    verdicts = self.verifier.verify([(ex.meta["gold"], a) for ex, a in zip(examples, answers)])
    hits = [text_scan.over_limit(c) or timed_out for c, (_, timed_out) in zip(completions, verdicts)]
    return [ok for ok, _ in verdicts], hits

  def grading_rules(self) -> str:
    return ("d1 parse_math_answers: last closed non-empty \\boxed{}, else last non-empty <answer> span"
            + (", else the whole completion" if self.prompt_style == "plain" else "")
            + f"; math-verify equivalence ({self.verifier.timeout_s:g} s CPU per item, in a worker); "
            f"completions > {text_scan.MAX_COMPLETION_CHARS} chars score 0")
