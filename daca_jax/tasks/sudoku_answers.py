"""4x4 Sudoku answers: reading the answer grid out of a completion, and d1's cell reward.

A ``"plain"`` completion's answer is its first 16 characters after leading whitespace. A ``"chat"``
completion's answer is read with d1's evaluation parser (``eval/parse_and_get_acc.py``,
``parse_sudoku_answers``): the first of its five patterns that finds a non-empty string (digits in a
code fence inside the answer; the first answer span; the text after ``</answer>``; 16 digits before a
``</answer>``; a free-standing 16-digit number), whitespace removed, then padded with ``0`` or
truncated to 16 characters for cell accuracy.

Where the chat grader differs from d1's evaluation parser, and why: the completion is cut at the
first end-of-text marker and text after it is ignored (d1 reads patterns 3 and 5 across it; a
decode may keep text generated after the model's end); each pattern is matched in linear time
instead of with d1's regular expressions (same matches: ``\\d``/``\\s``/``\\w``/``\\b`` keep
Python's Unicode meaning). d1's training reward (``sudoku_reward_func``) reads the last answer span
and keeps only its digits; one grader serves training and evaluation here, with the evaluation
parser's rules (the two agree on answers written as 16 digits in one answer span).
The task (:mod:`daca_jax.tasks.sudoku`) re-exports every public name.
"""
from __future__ import annotations

from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks import text_scan
from daca_jax.tasks.sudoku_grids import NUM_CELLS


def parse_completion(text: str) -> str:
  """Answer grid of a ``"plain"`` completion: its first 16 characters after leading whitespace.

  The result may be shorter than 16 characters or hold non-digits; such cells count as wrong.
  """
  return text.lstrip()[:NUM_CELLS]


def _fenced_digits(text: str, start: int) -> str | None:
  """d1 pattern 1 after the first ``<answer>`` (at ``start``): ``.*?```\\s*([\\d\\s]+)```` ``."""
  fence = text.find("```", start)
  while fence >= 0:
    j = fence + 3
    while j < len(text) and (text[j].isdecimal() or text[j].isspace()):
      j += 1
    if j > fence + 3 and text.startswith("```", j):
      return text[fence + 3:j]  # the first match decides (re.search); a later fence is not tried
    fence = text.find("```", fence + 1)  # the run held no backtick: the next fence is at or after j
  return None


def _digits_before_close(text: str) -> str | None:
  """d1 pattern 4: ``.*?(\\d{16})\\s*</answer>`` (the first ``</answer>`` that 16 digits and then
  only whitespace precede)."""
  close = text.find("</answer>")
  while close >= 0:
    end = close
    while end > 0 and text[end - 1].isspace():
      end -= 1
    if end >= NUM_CELLS and all(c.isdecimal() for c in text[end - NUM_CELLS:end]):
      return text[end - NUM_CELLS:end]
    close = text.find("</answer>", close + 1)
  return None


def _free_standing_digits(text: str) -> str | None:
  """d1 pattern 5: ``\\b(\\d{16})\\b`` (the first maximal run of word characters that is exactly
  16 decimal digits)."""
  i, n = 0, len(text)
  while i < n:
    if text[i].isalnum() or text[i] == "_":
      j = i
      while j < n and (text[j].isalnum() or text[j] == "_"):
        j += 1
      if j - i == NUM_CELLS and all(c.isdecimal() for c in text[i:j]):
        return text[i:j]
      i = j
    else:
      i += 1
  return None


def extract_chat_answer(completion: str) -> str:
  """The answer string of a ``"chat"`` completion by d1's evaluation parser, whitespace removed
  ("" when no pattern finds one); see the module docstring. Linear time.

  The patterns, in order (the first non-empty result wins): 1. digits in a code fence after the
  first ``<answer>``; 2. the first ``<answer>`` up to ``</answer>`` (or the end-of-text marker);
  3. the text after the first ``</answer>``; 4. 16 digits before a ``</answer>``; 5. a
  free-standing 16-digit number.
  """
  if text_scan.over_limit(completion):
    return ""
  text = fmt.clean_completion(completion)
  cut = len(text) < len(completion)
  found: list[str | None] = []
  opening = text.find("<answer>")
  closing = text.find("</answer>")
  if opening >= 0:
    start = opening + len("<answer>")
    found.append(_fenced_digits(text, start))
    end = text.find("</answer>", start)
    found.append(text[start:end] if end >= 0 else (text[start:] if cut else None))
  if closing >= 0:
    found.append(text[closing + len("</answer>"):])
  for candidate in found:
    if candidate is not None and candidate.strip():
      return "".join(c for c in candidate if not c.isspace())
  for pattern in (_digits_before_close, _free_standing_digits):
    candidate = pattern(text)
    if candidate:
      return candidate
  return ""


def answer_grid(completion: str, prompt_style: str = "plain") -> str:
  """The 16-character grid graded for ``completion``: ``"plain"``: :func:`parse_completion`;
  ``"chat"``: :func:`extract_chat_answer` padded with ``0`` / truncated to 16 (d1), "" if empty."""
  if prompt_style == "plain":
    return "" if text_scan.over_limit(completion) else parse_completion(completion)
  answer = extract_chat_answer(completion)
  return (answer + "0" * NUM_CELLS)[:NUM_CELLS] if answer else ""


def correct_cells(answer: str, puzzle: str, solution: str) -> tuple[int, int]:
  """``(blank cells of puzzle where answer equals solution, blank cells)``."""
  blanks = [i for i, c in enumerate(puzzle) if c == "0"]
  return sum(1 for i in blanks if i < len(answer) and answer[i] == solution[i]), len(blanks)


def cell_reward(completion: str, puzzle: str, solution: str, prompt_style: str = "plain") -> float:
  """d1's reward: fraction of blank cells where the completion's answer equals ``solution``.

  Args:
    completion: decoded completion text (any string).
    puzzle: 16 digits, ``'0'`` = blank.
    solution: the stored 16-digit solution.
    prompt_style: how the answer is read (:func:`answer_grid`).

  Returns:
    A float in [0, 1]; 1.0 for a puzzle without blanks.
  """
  good, blanks = correct_cells(answer_grid(completion, prompt_style), puzzle, solution)
  return good / blanks if blanks else 1.0
