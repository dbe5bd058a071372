"""The linear-time scanners of untrusted completions against the regular expressions they replace.

Oracles: Python's ``re`` with the exact patterns the graders (and d1's reference parsers) used, run
on short random texts built from the tokens that matter (tags, braces, fences, whitespace), where
backtracking is harmless; a direct transcription of the previous brace-matching ``last_boxed``.
"""
from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daca_jax.tasks.json_schema import parsing as jparse
from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks import sudoku, text_scan
from daca_jax.tasks.countdown import _left_of_equation

_STRICT = re.compile(r"<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\s*", re.DOTALL)
_SOFT = re.compile(r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)```", re.DOTALL)
_OPEN_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n")
_JSON_FENCE = re.compile(r"\A```[A-Za-z0-9_-]*\s*\n(.*?)\n?```\Z", re.DOTALL)
_D1_EQUATION = re.compile(r"([0-9+\-*/() ]+)=[0-9. ]+")
# d1's parse_sudoku_answers patterns, in order.
_D1_SUDOKU = [r"<answer>.*?```\s*([\d\s]+)```", r"<answer>(.*?)(?:<\|eot_id\|>|<\|endoftext\|>|</answer>)",
              r"</answer>\s*(.*?)(?:<\|eot_id\|>|<\|endoftext\|>|$)", r".*?(\d{16})\s*</answer>",
              r"\b(\d{16})\b"]

_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


def _texts(pieces: list[str], max_size: int = 14):
  return st.lists(st.sampled_from(pieces), max_size=max_size).map("".join)


_FORMAT_TEXT = _texts(["<reasoning>", "</reasoning>", "<answer>", "</answer>", "\n", " ", "x", "\t",
                       "\u00a0", "<", "/", "<|eot_id|>"])


@_SETTINGS
@given(_FORMAT_TEXT)
def test_format_rewards_and_answer_spans_equal_the_regexes(text):
  cleaned = fmt.clean_completion(text)
  assert fmt.strict_format_reward(text) == (0.5 if _STRICT.fullmatch(cleaned.lstrip()) else 0.0)
  assert fmt.soft_format_reward(text) == (0.5 if _SOFT.match(cleaned.lstrip()) else 0.0)
  assert fmt.answer_spans(text) == [m.strip() for m in _ANSWER.findall(cleaned)]
  assert text_scan.tag_spans(text, "<answer>", "</answer>") == [m.span(1) for m in _ANSWER.finditer(text)]
  prefixed = "<reasoning>" + cleaned
  assert fmt.strict_format_reward(text, "<reasoning>") == (0.5 if _STRICT.fullmatch(prefixed.lstrip()) else 0.0)


@_SETTINGS
@given(_texts(["```", "`", "\n", " ", "\t", "py", "python", "x", "+", "-"]))
def test_code_fences_equal_the_regexes(text):
  assert text_scan.code_fences(text) == _FENCE.findall(text)
  assert text_scan.fence_openings(text) == [(m.group(1), m.end()) for m in _OPEN_FENCE.finditer(text)]
  m = _JSON_FENCE.match(text)
  assert jparse._strip_fence(text) == (m.group(1) if m else text)


def _reference_last_boxed(text: str) -> str | None:
  """The previous implementation (a forward scan from every command: quadratic, exact)."""
  starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)", text)]
  for start in reversed(starts):
    i = start
    while i < len(text) and text[i] == " ":
      i += 1
    if i < len(text) and text[i] == "{":
      depth = 0
      for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
          return text[i + 1:j]
    elif i > start:
      m = re.match(r"[^\s$]+", text[i:])
      if m:
        return m.group(0)
  return None


@_SETTINGS
@given(_texts(["\\boxed", "\\fbox", "{", "}", " ", "x", "1", "$", "\n", "\\box"]))
def test_boxes_equal_the_reference_scan(text):
  assert text_scan.last_boxed(text) == _reference_last_boxed(text)
  for box in text_scan.boxes(text):
    if box.content is not None and text[box.start:].startswith(("\\boxed{", "\\fbox{")):
      assert text[box.end - 1] == "}" and text[box.end - 1 - len(box.content) - 1] == "{"


@_SETTINGS
@given(_texts(["1", "23", "+", "-", "*", "/", "(", ")", " ", "=", ".", "x", "=5"]))
def test_left_of_equation_equals_d1s_regex(text):
  m = _D1_EQUATION.search(text)
  assert _left_of_equation(text) == (m.group(1).strip() if m else None)


def _d1_sudoku_reference(text: str) -> str:
  text = fmt.clean_completion(text) + ("<|eot_id|>" if fmt.clean_completion(text) != text else "")
  for pattern in _D1_SUDOKU:
    m = re.search(pattern, text, re.DOTALL)
    if m and m.group(1).strip():
      return re.sub(r"\s", "", m.group(1).strip())
  return ""


@_SETTINGS
@given(_texts(["<answer>", "</answer>", "```", "1234", "4321", "1234123412341234", "12", " ", "\n",
               "x", "<|eot_id|>", "\u0663", "_"], max_size=12))
def test_sudoku_chat_reader_equals_d1s_patterns(text):
  assert sudoku.extract_chat_answer(text) == _d1_sudoku_reference(text)
