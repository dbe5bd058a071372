"""d1's RL training rewards, as released (``task.reward="d1"``), reimplemented with linear-time scans.

Source: dllm-reasoning/d1 ``diffu-grpo/reward_func.py`` and ``diffu-grpo/math500_utils.py`` at commit
837888f22c21a5da91a0af2b0d7b19e81d9b47ec (the release whose SLURM configs the paper's runs use; wd1,
xiaohangt/wd1 @ 08989851, copies the same file unchanged). ``"d1_dotall"`` is d1's later commit
4bab4b9ac07ee83956308e977dbc1d58a11d8ab7, which adds ``re.DOTALL`` to the two format patterns and
changes nothing else in these rewards. d1 sums its reward functions with weight 1 (TRL's default
``reward_weights``); per task (``diffu-grpo/diffu_grpo_train.py``):

* gsm8k: ``xml_count + soft_format + strict_format + int_answer + 2.0 * correct`` (at most 4.0 + 0.001);
  ``correct`` is exact string equality of :func:`extract_xml_answer` with the gold text after ``####``.
* math500: ``2.0 * correct + boxed_format``: :func:`last_boxed_only` / :func:`remove_boxed` of the
  whole completion, equal under the Hendrycks-MATH normaliser (:func:`math_equiv`); see
  :func:`boxed_format` for what the 0.5-weighted format term really checks.
* countdown: 1.0 correct, 0.1 for any other text inside the last ``<answer>...</answer>``, 0 without.
* sudoku4x4: the fraction of the puzzle's blank cells whose digit (of the last answer span, digits
  only, padded with ``0`` or cut to 16) equals the stored solution.
* code and JSON: d1's paper release has no such reward (its later coding reward executes model code
  in the trainer's own process and is not ported); :mod:`daca_jax.tasks.training_rewards` refuses them.

What is graded: the completion as the library decoded it (special tokens skipped, cut at the first
EOS; d1 also skips special tokens but keeps any non-special text after the EOS). d1's training prompt
does not pre-fill ``<reasoning>``, so its completions open the tag themselves; the library's chat
prompts end with it (d1's evaluation ``add_reasoning``), so for them the reward reads
``"<reasoning>" + completion``. Completions longer than
:data:`~daca_jax.tasks.text_scan.MAX_COMPLETION_CHARS` score 0 (a grader bound hit, as everywhere in
the library; d1 has no bound). Every ``correct`` flag is d1's own correctness term, so the trainer's
``accuracy`` still means "correct" although the rewards reach 4.

Where d1's training reward is known to be wrong (each checked against the code at 837888f):

* soft format (``<reasoning>.*?</reasoning>\\s*<answer>.*?</answer>`` with ``re.match``, no
  ``re.DOTALL``): ``.`` does not cross a newline, so the whole reasoning must sit on the first line
  and the answer on one line; multi-line reasoning never matches, and neither does the layout d1's
  own prompt asks for (a newline right after ``<reasoning>``). The strict pattern likewise needs
  exactly one reasoning line and one answer line, and a newline right after ``</answer>`` (a
  completion that stops at ``</answer>`` fails it). 4bab4b9 (``d1_dotall``) fixes the newline part only.
* GSM8K correctness compares strings: LLaDA-8B-Instruct's usual ``<answer>\\boxed{46}</answer>``
  (what d1's own evaluation prompt asks for) scores 0, as do ``$46``, ``46.0`` and, for the 82 of 7473
  training answers written with a thousands separator (``1,080``), any answer without it; the int
  term needs ``str.isdigit`` (no sign, no box). Only the text after the LAST ``<answer>`` is read.
* XML count: ``count("\\n<answer>\\n") == 1`` subtracts 0.001 x the length of the text after the last
  ``"\\n</answer>\\n"``; when the completion ends at ``</answer>`` with no newline there is no such
  separator and the whole completion's length is subtracted (a well-formed 800-character answer
  loses 0.8), while ``"\\n</answer>"`` at the very end earns +0.001.
* MATH format term: ``"\\boxed" in r`` is written without a raw string, so ``\\b`` is a backspace and
  the test never finds a box; the term is 0.5 x (1 if ``<answer>`` occurs + 0.5), i.e. 0.75 with an
  answer tag and 0.25 without, whatever is boxed. The boxed answer is the last ``\\boxed`` anywhere in
  the completion (a ``\\boxed 5`` anywhere wins over every ``\\boxed{}``); without a box the whole
  completion is compared; ``\\fbox{}`` is never unwrapped. The normaliser misses equal forms
  (``0.5`` vs ``1/2`` vs ``\\frac12`` only partly, ``2`` vs ``2.0``) and, when it raises (a second
  ``\\text{ ``, a trailing ``\\sqrt``/``\\frac``, one ``/`` between non-integers), the raw strings are
  compared.
* Countdown: any text in an answer span earns the 0.1 format score, including ``\\boxed{...}`` (not
  unwrapped: LLaDA's usual ``<answer>\\boxed{92 / 2}</answer>`` gets 0.1, never 1.0); the answer is
  ``eval``-ed. Here it is parsed with the project's bounded parser
  (:func:`daca_jax.tasks.arith.parse_expression`) instead, so ``2**3``, ``7//2``, ``3.``, a form feed
  or more than 256 characters score 0.1 where d1 might give 1.0, and a newline between tokens outside
  parentheses is accepted where ``eval`` raises (1.0 instead of 0.1); ``abs(v - t) < 1e-5`` is exact
  equality here (the same decision for numbers <= 100).
* Sudoku: digits are kept with ``str.isdigit``, so superscripts count as characters (never as right
  cells); cells beyond a short answer are ``0`` (wrong); a puzzle without blanks scores 0.

Every scan is linear in the completion's length (the lazy patterns above are quadratic on hostile
text; the tests compare both on random and hand-made text).

Why one module over 350 lines: it ports one file of d1 (``reward_func.py``, with the helpers it takes from
``math500_utils.py``), kept together so that it reads side by side with the source it must match.
"""
from __future__ import annotations

import re
from typing import Callable, Mapping, Sequence

from daca_jax.tasks import text_scan
from daca_jax.tasks.arith import ExpressionError, parse_expression
from daca_jax.tasks.base import Example
from daca_jax.tasks.reasoning_format import GENERATION_PREFIX

D1_COMMIT = "837888f22c21a5da91a0af2b0d7b19e81d9b47ec"  # dllm-reasoning/d1, diffu-grpo/reward_func.py
D1_DOTALL_COMMIT = "4bab4b9ac07ee83956308e977dbc1d58a11d8ab7"  # the same file with re.DOTALL formats

CORRECT_GSM8K = 2.0  # correctness_reward_func
CORRECT_MATH = 2.0  # correctness_reward_func_math
FORMAT_TERM = 0.5  # strict / soft / int rewards and the MATH format term's weight
COUNTDOWN_CORRECT, COUNTDOWN_FORMAT = 1.0, 0.1  # compute_score(score, format_score)
SUDOKU_CELLS = 16

# (reward, correct) of one completion for one example.
ExampleReward = Callable[[str, Example], "tuple[float, bool]"]

_SEPARATOR = "\n</reasoning>\n<answer>\n"  # the middle of the strict layout
_DIGITS_RE = re.compile(r"\d+")  # validate_equation's number runs (Unicode \d, linear: no backtracking)
_BRACES_RE = re.compile(r"[{}]")


# --- GSM8K ---------------------------------------------------------------------------------------

def extract_xml_answer(text: str) -> str:
  """d1's ``extract_xml_answer``: the text after the LAST ``<answer>`` up to the next ``</answer>``
  (or the end), stripped; without ``<answer>``, the text before the first ``</answer>``."""
  start = text.rfind("<answer>")
  start = 0 if start < 0 else start + len("<answer>")
  end = text.find("</answer>", start)
  return text[start:end if end >= 0 else len(text)].strip()


def strict_format(text: str, dotall: bool = False) -> float:
  """0.5 iff ``re.match(r"^<reasoning>\\n.*?\\n</reasoning>\\n<answer>\\n.*?\\n</answer>\\n$", text)``
  matches (with ``re.DOTALL`` when ``dotall``), decided in linear time.

  Without DOTALL, ``.`` stops at newlines, so the lines must be exactly ``<reasoning>``, one line,
  ``</reasoning>``, ``<answer>``, one line, ``</answer>`` and then one or two empty ends (``$`` also
  matches before a final newline). With DOTALL, the text must start with ``<reasoning>\\n``, end
  with ``\\n</answer>\\n`` (or that plus ``\\n``), and hold the separator ``\\n</reasoning>\\n<answer>\\n``
  in between (the earliest one is the best candidate).
  """
  if not dotall:
    lines = text.split("\n")
    ok = (len(lines) in (7, 8) and lines[0] == "<reasoning>" and lines[2] == "</reasoning>"
          and lines[3] == "<answer>" and lines[5] == "</answer>" and all(not x for x in lines[6:]))
    return FORMAT_TERM if ok else 0.0
  head = "<reasoning>\n"
  if not text.startswith(head):
    return 0.0
  if text.endswith("\n</answer>\n"):
    tail = len(text) - len("\n</answer>\n")
  elif text.endswith("\n</answer>\n\n"):
    tail = len(text) - len("\n</answer>\n\n")
  else:
    return 0.0
  sep = text.find(_SEPARATOR, len(head))
  return FORMAT_TERM if 0 <= sep and sep + len(_SEPARATOR) <= tail else 0.0


class _Cursor:
  """The first occurrence of ``needle`` at or after a position, for positions that only grow: each
  query scans only text no earlier query scanned (or reuses the last hit), so all queries together
  are linear in the text."""

  def __init__(self, text: str, needle: str):
    self.text, self.needle = text, needle
    self.hit, self.searched_from = -1, -1

  def at_or_after(self, pos: int) -> int:
    """Index of the first ``needle`` at index >= ``pos``, or -1; ``pos`` must not decrease."""
    if self.hit >= pos:
      return self.hit
    if self.searched_from >= 0 and self.hit < 0:
      return -1  # an earlier search from before pos found none
    self.hit = self.text.find(self.needle, pos)
    self.searched_from = pos
    return self.hit


def soft_format(text: str, dotall: bool = False) -> float:
  """0.5 iff ``re.match(r"<reasoning>.*?</reasoning>\\s*<answer>.*?</answer>", text)`` matches (with
  ``re.DOTALL`` when ``dotall``), decided in linear time.

  Each ``</reasoning>`` (on the first line without DOTALL: ``.`` stops at newlines) is followed by
  its whitespace run, which must be followed by ``<answer>`` (``\\s*`` cannot give back a character:
  ``<`` is not whitespace); a ``</answer>`` must follow that, on the same line without DOTALL. The
  candidates' answer positions only grow, so the searches for ``</answer>`` and for the next newline
  advance through the text once.
  """
  open_tag, close_tag = "<reasoning>", "</reasoning>"
  if not text.startswith(open_tag):
    return 0.0
  limit = len(text)
  if not dotall:
    newline = text.find("\n", len(open_tag))
    limit = len(text) if newline < 0 else newline
  closes, newlines = _Cursor(text, "</answer>"), _Cursor(text, "\n")
  pos = text.find(close_tag, len(open_tag), limit)
  while pos >= 0:
    i = pos + len(close_tag)
    while i < len(text) and text[i].isspace():  # re's \s is str.isspace, character by character
      i += 1
    if text.startswith("<answer>", i):
      body = i + len("<answer>")
      close = closes.at_or_after(body)
      if close < 0:
        return 0.0  # no </answer> after this candidate, so none after any later one either
      newline = newlines.at_or_after(body)
      if dotall or newline < 0 or close < newline:
        return FORMAT_TERM
    pos = text.find(close_tag, pos + len(close_tag), limit)
  return 0.0


def xml_count(text: str) -> float:
  """d1's ``count_xml`` (rules in the module docstring): 0.125 per tag line found exactly once, less
  0.001 per character after the last ``\\n</answer>\\n`` (or of the whole text when there is none) and
  after the last ``\\n</answer>`` (minus one). Same float operations in the same order as d1."""
  count = 0.0
  if text.count("<reasoning>\n") == 1:
    count += 0.125
  if text.count("\n</reasoning>\n") == 1:
    count += 0.125
  if text.count("\n<answer>\n") == 1:
    count += 0.125
    count -= len(text.split("\n</answer>\n")[-1]) * 0.001  # split: non-overlapping, left to right
  if text.count("\n</answer>") == 1:
    count += 0.125
    count -= (len(text.split("\n</answer>")[-1]) - 1) * 0.001
  return count


def int_answer(text: str) -> float:
  """0.5 iff the extracted answer is ``str.isdigit`` (d1's ``int_reward_func``)."""
  return FORMAT_TERM if extract_xml_answer(text).isdigit() else 0.0


def gsm8k_reward(text: str, gold: str, dotall: bool = False) -> tuple[float, bool]:
  """``(reward, correct)`` of d1's five GSM8K rewards summed in d1's order (xml count, soft, strict,
  int, correctness); ``gold`` is the text after ``####`` in GSM8K's answer, stripped."""
  correct = extract_xml_answer(text) == gold
  terms = (xml_count(text), soft_format(text, dotall), strict_format(text, dotall), int_answer(text),
           CORRECT_GSM8K if correct else 0.0)
  return sum(terms), correct


# --- MATH ----------------------------------------------------------------------------------------

class _Raised(Exception):
  """Where d1's code raises (and its caller falls back to the raw strings)."""


def last_boxed_only(text: str) -> str | None:
  """d1's ``last_boxed_only_string``.

  If ``"\\boxed "`` occurs anywhere: ``"\\boxed "`` + the text after its last occurrence up to the
  next ``$``. Else from the last ``\\boxed`` (or, without one, the last ``\\fbox``; without either the
  whole text is returned) to the first ``}`` that brings the brace depth counted from there back to
  0 (None if none does). One pass over the braces.
  """
  if "\\boxed " in text:
    return "\\boxed " + text[text.rfind("\\boxed ") + len("\\boxed "):].split("$", 1)[0]
  start = text.rfind("\\boxed")
  if start < 0:
    start = text.rfind("\\fbox")
    if start < 0:
      return text
  depth = 0
  for m in _BRACES_RE.finditer(text, start):
    depth += 1 if m.group() == "{" else -1
    if m.group() == "}" and depth == 0:
      return text[start:m.end()]
  return None


def remove_boxed(boxed: str | None) -> str:
  """d1's ``remove_boxed``: ``\\boxed X`` -> ``X``, ``\\boxed{X}`` -> ``X``, anything else unchanged.

  Raises:
    _Raised: ``boxed`` is None, or holds ``"\\boxed "`` without starting with it (d1 raises).
  """
  if boxed is None:
    raise _Raised("no closed box")
  if "\\boxed " in boxed:
    if not boxed.startswith("\\boxed "):
      raise _Raised("'\\boxed ' inside")
    return boxed[len("\\boxed "):]
  if boxed.startswith("\\boxed{") and boxed.endswith("}"):
    return boxed[len("\\boxed{"):-1]
  return boxed


def _unboxed(text: str) -> str:
  """``remove_boxed(last_boxed_only(text))``, or ``text`` itself where d1's ``try`` falls back."""
  try:
    return remove_boxed(last_boxed_only(text))
  except _Raised:
    return text


def _fix_fracs(s: str) -> str:
  parts = s.split("\\frac")
  out = [parts[0]]
  for sub in parts[1:]:
    out.append("\\frac")
    if not sub:
      raise _Raised("trailing \\frac")  # d1: substr[0] of an empty string
    if sub[0] == "{":
      out.append(sub)
    elif len(sub) < 2:
      return s
    elif sub[1] != "{":
      out.append("{" + sub[0] + "}{" + sub[1] + "}" + sub[2:])
    else:
      out.append("{" + sub[0] + "}" + sub[1:])
  return "".join(out)


def _fix_sqrt(s: str) -> str:
  if "\\sqrt" not in s:
    return s
  parts = s.split("\\sqrt")
  out = [parts[0]]
  for sub in parts[1:]:
    if not sub:
      raise _Raised("trailing \\sqrt")  # d1: split[0] of an empty string
    out.append("\\sqrt" + sub if sub[0] == "{" else "\\sqrt{" + sub[0] + "}" + sub[1:])
  return "".join(out)


def _fix_a_slash_b(s: str) -> str:
  parts = s.split("/")
  if len(parts) != 2:
    return s
  try:
    a, b = int(parts[0]), int(parts[1])
  except ValueError:
    raise _Raised("a/b of non-integers") from None  # d1 catches only the AssertionError below
  return f"\\frac{{{a}}}{{{b}}}" if s == f"{a}/{b}" else s


def normalize_math(s: str) -> str:
  """d1's ``strip_string`` (the Hendrycks-MATH answer normaliser), step by step in d1's order.

  Raises:
    _Raised: where d1's steps raise (a second ``\\text{ ``, a trailing ``\\frac``/``\\sqrt``, one
      ``/`` between non-integers).
  """
  for old, new in (("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac"),
                   ("\\left", ""), ("\\right", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("\\$", "")):
    s = s.replace(old, new)
  if "\\text{ " in s:  # units on the right
    parts = s.split("\\text{ ")
    if len(parts) != 2:
      raise _Raised("several '\\text{ '")
    s = parts[0]
  s = s.replace("\\%", "").replace("\\%", "")  # twice, as d1 (the first pass can form a new one)
  s = s.replace(" .", " 0.").replace("{.", "{0.")
  if not s:
    return s
  if s[0] == ".":
    s = "0" + s
  sides = s.split("=")
  if len(sides) == 2 and len(sides[0]) <= 2:
    s = sides[1]
  s = _fix_sqrt(s).replace(" ", "")
  s = _fix_fracs(s)
  if s == "0.5":
    s = "\\frac{1}{2}"
  return _fix_a_slash_b(s)


def math_equiv(a: str | None, b: str | None) -> bool:
  """d1's ``is_equiv``: both None -> True; one None -> False; equal after :func:`normalize_math`, or,
  when that raises for either, equal as given."""
  if a is None or b is None:
    return a is None and b is None
  try:
    return normalize_math(a) == normalize_math(b)
  except _Raised:
    return a == b


def boxed_format(text: str) -> float:
  """d1's ``boxed_and_answer_tags_format_reward``: 0.5 x (1 if ``<answer>`` occurs, + 1 if the
  answer span (the text between the first and second ``<answer>``, up to ``</answer>``; the whole
  text without a tag) holds a backspace followed by ``oxed``, else + 0.5). The backspace is d1's
  ``"\\boxed"`` written without a raw string; see the module docstring."""
  first = text.find("<answer>")
  if first < 0:
    span, score = text, 0.0
  else:
    start = first + len("<answer>")
    second = text.find("<answer>", start)
    span = text[start:second if second >= 0 else len(text)]
    close = span.find("</answer>")
    span, score = (span[:close] if close >= 0 else span), 1.0
  score += 1.0 if "\x08oxed" in span else 0.5
  return score * 0.5


def math_reward(text: str, gold: str) -> tuple[float, bool]:
  """``(reward, correct)``: ``2.0 * math_equiv(unboxed completion, unboxed gold) + boxed_format``."""
  correct = math_equiv(_unboxed(text), _unboxed(gold))
  return (CORRECT_MATH if correct else 0.0) + boxed_format(text), correct


# --- Countdown and Sudoku ------------------------------------------------------------------------

def last_answer_span(text: str) -> str | None:
  """d1's ``extract_solution``: the last match of ``<answer>(.*?)</answer>`` (DOTALL), stripped."""
  spans = text_scan.tag_spans(text, "<answer>", "</answer>")
  return text[spans[-1][0]:spans[-1][1]].strip() if spans else None


def _uses_numbers(equation: str, numbers: Sequence[int]) -> bool:
  """d1's ``validate_equation``: the digit runs, as integers, are the numbers as a multiset."""
  try:
    found = [int(run) for run in _DIGITS_RE.findall(equation)]
  except ValueError:  # a run beyond int()'s digit limit: d1's bare except gives False
    return False
  return sorted(found) == sorted(int(n) for n in numbers)


def countdown_reward(text: str, numbers: Sequence[int], target: int) -> tuple[float, bool]:
  """``(reward, correct)``: d1's ``compute_score`` (1.0 / 0.1 / 0), the answer parsed, not evaluated.

  0 without an answer span; 0.1 if the span's numbers are not the item's (as a multiset), if it has
  a character outside d1's ``[\\d+\\-*/().\\s]``, if the parser rejects it, or if its value is not
  the target; 1.0 otherwise.
  """
  equation = last_answer_span(text)
  if equation is None:
    return 0.0, False
  if not _uses_numbers(equation, numbers) or not all(
      c in "+-*/()." or c.isdecimal() or c.isspace() for c in equation):
    return COUNTDOWN_FORMAT, False
  try:
    value = parse_expression(equation).value
  except ExpressionError:
    return COUNTDOWN_FORMAT, False
  return (COUNTDOWN_CORRECT, True) if value == target else (COUNTDOWN_FORMAT, False)


def sudoku_reward(text: str, puzzle: str, solution: str) -> tuple[float, bool]:
  """``(reward, correct)``: d1's ``sudoku_reward_func``; correct = every blank cell right."""
  span = last_answer_span(text)
  digits = "" if span is None else "".join(c for c in span if c.isdigit())
  if not digits:
    return 0.0, False
  digits = (digits + "0" * SUDOKU_CELLS)[:SUDOKU_CELLS]
  blanks = [i for i in range(SUDOKU_CELLS) if puzzle[i] == "0"]
  if not blanks:
    return 0.0, False
  score = sum(digits[i] == solution[i] for i in blanks) / len(blanks)
  return score, score == 1.0


# --- per task ------------------------------------------------------------------------------------

def graded_text(completion: str, example: Example) -> str:
  """The text d1's reward reads: ``"<reasoning>" + completion`` when the example's prompt pre-fills
  the tag (the library's chat style), else the completion (see module docstring)."""
  return GENERATION_PREFIX + completion if example.prompt.endswith(GENERATION_PREFIX) else completion


def _meta(example: Example, key: str, task: str) -> object:
  try:
    return example.meta[key]
  except KeyError:
    raise KeyError(f"d1's {task} reward needs example.meta[{key!r}]; this example has "
                   f"{sorted(example.meta)}") from None


def _per_task(dotall: bool) -> Mapping[str, ExampleReward]:
  return {
      "gsm8k": lambda c, ex: gsm8k_reward(graded_text(c, ex), str(_meta(ex, "gold_text", "gsm8k")), dotall),
      "math500": lambda c, ex: math_reward(graded_text(c, ex), str(_meta(ex, "gold", "math500"))),
      "countdown": lambda c, ex: countdown_reward(graded_text(c, ex), _meta(ex, "numbers", "countdown"),
                                                  int(_meta(ex, "target", "countdown"))),
      "sudoku4x4": lambda c, ex: sudoku_reward(graded_text(c, ex), str(_meta(ex, "puzzle", "sudoku4x4")),
                                               str(_meta(ex, "solution", "sudoku4x4"))),
  }


D1_REWARDS: Mapping[str, ExampleReward] = _per_task(dotall=False)  # commit 837888f (the paper's)
D1_DOTALL_REWARDS: Mapping[str, ExampleReward] = _per_task(dotall=True)  # commit 4bab4b9
