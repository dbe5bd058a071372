"""GSM8K grade-school math (``gsm8k``): numeric answers graded by exact comparison.

Data: ``<data_dir>/gsm8k/test.jsonl`` (1319 items) and ``train.jsonl`` (7473), openai/grade-school-math
JSONL (``question``, ``answer`` = worked solution ending ``#### <number>``).

Prompts: ``"chat"`` is d1's GSM8K evaluation prompt (:data:`SYSTEM_PROMPT`, d1 ``eval/gsm8k.py``:
reason, then ``\\boxed{}`` the answer inside ``<answer>`` tags); ``"d1_train"`` is d1's GSM8K training
prompt (:func:`daca_jax.tasks.d1_train_prompts.gsm8k_message`: the layout only, no box); ``"plain"`` is
the bare question.

Grading: :func:`daca_jax.tasks.math_answers.extract_gsm8k_answer`, d1's evaluation parser (first
``\\boxed{}`` holding a number, else the answer span), exact rational equality with the gold number.
Its module docstring lists every rule that differs from d1's parser and why. Option
``last_number_fallback`` (default False, as d1) also reads the last number of a completion that
states no answer. Rewards, format terms and grader bounds: :mod:`daca_jax.tasks.qa_base`.

SFT targets: ``"plain"`` = the gold solution (calculator annotations ``<<...>>`` removed, ending
``#### N``); ``"chat"`` = that solution's reasoning lines continuing the prompt's ``<reasoning>``, and
``\\boxed{N}`` in ``<answer>`` (the layout d1's system prompt asks for); ``"d1_train"`` = the same
reasoning opened with ``<reasoning>`` and the bare ``N`` in ``<answer>`` (what d1's training prompt and
reward expect).
"""
from __future__ import annotations

import os
import re
from typing import Sequence

from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks import d1_train_prompts
from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks import text_scan
from daca_jax.tasks.base import TASKS, Example
from daca_jax.tasks.math_answers import extract_gsm8k_answer, gsm8k_gold
from daca_jax.tasks.qa_base import ReasoningQATask
from daca_jax.tasks.tokenizer import Tokenizer

_CALCULATOR_RE = re.compile(r"<<[^>]*>>")

# d1's GSM8K evaluation system prompt (dllm-reasoning/d1 eval/gsm8k.py, GSM_SYSTEM_PROMPT), verbatim.
SYSTEM_PROMPT = (
    "You are a math expert. You will be given a question to solve. Solve it step by step. Wrap the "
    "final answer in a \\boxed{}. \nRespond in the following format:\n<reasoning>\nYour reasoning "
    "here\n</reasoning>\n<answer>\n\\boxed{...}\n</answer>")


@TASKS.register("gsm8k")
class GSM8KTask(ReasoningQATask):
  """GSM8K (see module docstring and :class:`~daca_jax.tasks.qa_base.ReasoningQATask` for args).

  Args (beyond the base class's):
    last_number_fallback: grade a completion without box or answer span by its last number (not
      in d1's parser; default False).
  """

  name = "gsm8k"
  EVAL_FILE = "gsm8k/test.jsonl"
  TRAIN_FILE = "gsm8k/train.jsonl"
  DESCRIPTION = "GSM8K (openai/grade-school-math)"
  SYSTEM_PROMPT = SYSTEM_PROMPT
  OPTIONS = {**ReasoningQATask.OPTIONS, "last_number_fallback": False}

  def __init__(self, data_dir: str | os.PathLike[str] | None = None, eval_path: str = "",
               prompt_style: str = "chat", format_weight: float = 0.1, prompt_len: int = 0,
               last_number_fallback: bool = False, tokenizer: Tokenizer | None = None):
    super().__init__(data_dir=data_dir, eval_path=eval_path, prompt_style=prompt_style,
                     format_weight=format_weight, prompt_len=prompt_len, tokenizer=tokenizer)
    if not isinstance(last_number_fallback, bool):
      raise ConfigError("task.options.last_number_fallback", last_number_fallback, "True or False")
    self.last_number_fallback = last_number_fallback

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
              else fmt.reasoning_answer_target(self.prompt_style, solution, self._answer_text(number)))
    return Example(prompt=self.format_prompt(question), target=target,
                   meta={"gold": gold, "gold_text": number})

  def answer_only_target(self, example: Example) -> str:
    number = example.meta["gold_text"]
    return (f"#### {number}" if self.prompt_style == "plain"
            else fmt.reasoning_answer_target(self.prompt_style, "", self._answer_text(number)))

  def _answer_text(self, number: str) -> str:
    """What the answer tags hold in this style: ``\\boxed{N}`` (chat) or the bare N (d1_train)."""
    return number if self.prompt_style == fmt.D1_TRAIN else f"\\boxed{{{number}}}"

  def d1_train_message(self, question: str) -> str:
    return d1_train_prompts.gsm8k_message(question)

  def grade(self, completions: Sequence[str],
            examples: Sequence[Example]) -> tuple[list[bool], list[bool]]:
    """Exact rational equality of the extracted number with the gold number; completions longer
    than ``text_scan.MAX_COMPLETION_CHARS`` are bound hits."""
    hits = [text_scan.over_limit(c) for c in completions]
    correct = [not h and extract_gsm8k_answer(c, self.prompt_style, self.last_number_fallback)
               == ex.meta["gold"] for c, ex, h in zip(completions, examples, hits)]
    return correct, hits

  def grading_rules(self) -> str:
    rules = ("d1 parse_gsm_answers: first \\boxed{} holding a number (first number in it), else last "
             "non-empty <answer> span (last number); exact rational equality")
    if self.prompt_style == "plain":
      rules = "'#### N' first; then " + rules
    return rules + (f"; last-number fallback {'ON' if self.last_number_fallback else 'off'}"
                    f"; completions > {text_scan.MAX_COMPLETION_CHARS} chars score 0")
