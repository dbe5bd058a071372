"""GSM8K grade-school math (``gsm8k``): numeric answers graded by exact comparison.

Data: ``<data_dir>/gsm8k/test.jsonl`` (1319 items) and ``train.jsonl`` (7473), openai/grade-school-math
JSONL (``question``, ``answer`` = worked solution ending ``#### <number>``). Extraction and grading:
:func:`daca_jax.tasks.math_answers.extract_gsm8k_answer` (answer tag, ``####``, ``\\boxed{}``, last
number; commas, ``$`` and trailing periods dropped), exact rational equality with the gold number.
Rewards and prompt styles: :mod:`daca_jax.tasks.qa_base`.

SFT targets: ``"plain"`` = the gold solution (calculator annotations ``<<...>>`` removed, ending
``#### N``); ``"chat"`` = that solution's reasoning lines in ``<reasoning>`` tags and N in ``<answer>``.
"""
from __future__ import annotations

import re
from typing import Sequence

from daca_jax.errors import DataError
from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks.base import TASKS, Example
from daca_jax.tasks.math_answers import extract_gsm8k_answer, gsm8k_gold
from daca_jax.tasks.qa_base import ReasoningQATask

_CALCULATOR_RE = re.compile(r"<<[^>]*>>")


@TASKS.register("gsm8k")
class GSM8KTask(ReasoningQATask):
  """GSM8K (see module docstring and :class:`~daca_jax.tasks.qa_base.ReasoningQATask` for args)."""

  name = "gsm8k"
  EVAL_FILE = "gsm8k/test.jsonl"
  TRAIN_FILE = "gsm8k/train.jsonl"
  DESCRIPTION = "GSM8K (openai/grade-school-math)"

  def make_example(self, record: dict, where: str) -> Example:
    question, answer = record.get("question"), record.get("answer")
    if not isinstance(question, str) or not isinstance(answer, str):
      raise DataError(f"{where}: expected string fields 'question' and 'answer', got {sorted(record)}")
    gold = gsm8k_gold(answer)
    if gold is None:
      raise DataError(f"{where}: the answer does not end with '#### <number>': {answer[-60:]!r}")
    number = answer.rsplit("####", 1)[1].strip()
    solution = _CALCULATOR_RE.sub("", answer.rsplit("####", 1)[0]).strip()
    target = (f"{solution}\n#### {number}" if self.prompt_style == "plain"
              else fmt.reasoning_target(solution, number))
    return Example(prompt=self.format_prompt(question), target=target,
                   meta={"gold": gold, "gold_text": number})

  def answer_only_target(self, example: Example) -> str:
    number = example.meta["gold_text"]
    return f"#### {number}" if self.prompt_style == "plain" else fmt.reasoning_target("", number)

  def correct(self, completions: Sequence[str], examples: Sequence[Example]) -> list[bool]:
    """Exact rational equality of the extracted number with the gold number."""
    return [extract_gsm8k_answer(c) == ex.meta["gold"] for c, ex in zip(completions, examples)]
