"""d1's RL training prompts (prompt style ``"d1_train"`` of gsm8k, math500, countdown and sudoku4x4).

d1 trains on other prompts than it evaluates with. Source: dllm-reasoning/d1 @
837888f22c21a5da91a0af2b0d7b19e81d9b47ec ``diffu-grpo/data_utils.py`` (``SYSTEM_PROMPT``,
``SUDOKU_SYSTEM_PROMPT``, ``get_gsm8k_questions``, ``get_math_questions``,
``get_countdown_questions``, ``get_sudoku_questions``); wd1 (xiaohangt/wd1 @
08989851e5dd84ac31af04d28f20a93488d66ffb ``wd1/data_utils.py``) has the same prompts (only its imports
are reordered), and GDPO is "built on top of the D1 repository" (its README; its own data code is not
available offline), so the three base methods train on these.

How d1's trainer renders them (``diffu-grpo/diffu_grpo_trainer.py``, ``_generate_and_score_completions``):
each prompt is one user message, passed through TRL's ``maybe_apply_chat_template`` (huggingface/trl @
0f88c179e30b3439467942a08c3190f624d5c423 ``trl/data_utils.py``: ``apply_chat_template(messages,
tokenize=False, add_generation_prompt=True)`` since the last role is the user's) and tokenized with
``add_special_tokens=False``; **nothing is appended**: unlike d1's evaluation (``eval/gsm8k.py``
``create_prompt``, ``add_reasoning=True``), ``<reasoning>`` is not pre-filled, so the completion opens
the tag itself, which is what d1's training rewards (:mod:`daca_jax.tasks.d1_rewards`) read. Here the
same: :meth:`daca_jax.tasks.chat.ChatTemplate.user_turn` of the message below (the checkpoint's own
template; d1 truncates prompts to their last 200 tokens, which this library does not: it refuses none
of them, and pads to the longest).

What each training prompt asks for, against the evaluation prompt (the library's ``"chat"`` style):

* GSM8K: only the ``<reasoning>``/``<answer>`` layout; **no** ``\\boxed{}`` (the evaluation prompt asks
  for one, and d1's GSM8K training reward compares the bare answer text with the gold number).
* MATH: the same layout, then the evaluation prompt's math-expert sentence asking for ``\\boxed{}``.
* Countdown: the layout, then an instruction to give the bare expression inside ``<answer>`` with the
  example ``<answer>\\n2*4-3\\n</answer>`` (the evaluation prompt asks for ``\\boxed{}``).
* Sudoku: the evaluation prompt's system prompt and question, without the pre-filled ``<reasoning>``.
"""
from __future__ import annotations

from typing import Sequence

D1_COMMIT = "837888f22c21a5da91a0af2b0d7b19e81d9b47ec"  # dllm-reasoning/d1, diffu-grpo/data_utils.py

# data_utils.py SYSTEM_PROMPT, verbatim (it starts and ends with a newline).
SYSTEM_PROMPT = "\nRespond in the following format:\n<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>\n"

# get_math_questions: the sentence between the system prompt and the problem, verbatim (d1's f-string
# "\\boxed{{}}" is the text "\boxed{}").
MATH_INSTRUCTION = ("You are a math expert. You will be given a question to solve. Solve it step by step. "
                    "Wrap the final answer in a \\boxed{}. ")

# get_countdown_questions: the instruction after the system prompt, verbatim, around the item's numbers
# (a Python list, as the dataset's ``nums`` prints) and target.
COUNTDOWN_INSTRUCTION = (
    "Using only the numbers {numbers}, create an arithmetic expression that evaluates to exactly {target}. "
    "You must use all numbers from the list, and each number must be used exactly once. You may use the "
    "operations +, -, *, and / as needed. After reasoning, provide only your final expression inside "
    "<answer></answer> tags without including an equals sign or the target number. For example, if the "
    "numbers are [2, 3, 4] and the target is 5, a valid answer is: <answer>\n2*4-3\n</answer>")


def gsm8k_message(question: str) -> str:
  """The user message of a GSM8K training item (``get_gsm8k_questions``)."""
  return f"{SYSTEM_PROMPT}\n\n{question}"


def math_message(problem: str) -> str:
  """The user message of a MATH training item (``get_math_questions``)."""
  return f"{SYSTEM_PROMPT}\n\n{MATH_INSTRUCTION}\n\n{problem}"


def countdown_message(numbers: Sequence[int], target: int) -> str:
  """The user message of a Countdown training item (``get_countdown_questions``)."""
  instruction = COUNTDOWN_INSTRUCTION.format(numbers=[int(n) for n in numbers], target=int(target))
  return f"{SYSTEM_PROMPT}\n{instruction}"


def sudoku_message(system_prompt: str, puzzle: str) -> str:
  """The user message of a Sudoku training item (``get_sudoku_questions``); ``system_prompt`` is d1's
  ``SUDOKU_SYSTEM_PROMPT``, the same text as its evaluation's (:data:`daca_jax.tasks.sudoku.SYSTEM_PROMPT`)."""
  return f"{system_prompt}\n\nSolve the following Sudoku puzzle: {puzzle}\n"
