"""Answer extraction and grading for math word problems (GSM8K) and competition math (MATH500).

GSM8K: the answer is a number, read by :func:`extract_gsm8k_answer` with d1's evaluation parser
(dllm-reasoning/d1 ``eval/parse_and_get_acc.py``, ``parse_gsm_answers``), rule by rule:

1. the first ``\\boxed{...}`` whose content holds a number: the whole content if it is a number,
   else the first number in it (so ``\\boxed{2:00 pm}`` reads 2); empty and ``...`` boxes are
   skipped;
2. else the last complete, non-empty ``<answer>...</answer>`` span: the whole span if it is a
   number, else the last number in it;
3. else nothing (the completion states no answer). A last-number fallback over the whole
   completion exists as an option (``last_number_fallback``), OFF by default and in the d1 protocol:
   it credits truncated completions that never state an answer (+0.5 to +1.3 points over d1 on
   LLaDA-8B-Instruct generations).

``prompt_style="plain"`` (tiny models trained on GSM8K's own layout) first reads the number after the
last ``####``. Correctness is exact rational comparison (``fractions.Fraction``), so ``18``, ``18.0``,
``$18.`` and ``18.00`` all equal ``18``.

Kept from d1 on purpose, so that accuracies compare with d1's: the first box decides, and a box holding more
than a number reads its first number (``\\boxed{\\frac{18}{5}}`` reads 18, ``\\boxed{3 \\times 6 = 18}`` reads 3, a
box in the reasoning outranks the answer span's). A completion cannot gain by hedging: only one number is read.

Where this differs from d1's parser, and why:

* an empty ``\\boxed{}`` directly followed by a number (``\\boxed{}101``) reads that number: the
  diffusion sampler commits the braces before the digits and sometimes leaves them outside; d1
  reads nothing there (or, inside an answer span, the span's last number);
* boxes must be closed, with nested braces balanced (d1's ``\\boxed{(.*?)}`` stops at the first
  ``}`` and, for an unclosed box, reads up to any later ``}``);
* an empty answer span is skipped for an earlier non-empty one; d1 reads only the first span
  (``re.search``), and when it is empty returns nothing. Taking the last span follows d1's own
  training reward (``extract_xml_answer``); a completion with one span reads the same either way;
* numbers: thousands separators in groups of three (``1,234``, ``1 234``, and LaTeX's ``1{,}234``,
  ``1\\,234``, ``1,\\!234``), ``$`` and ``\\$`` on either side of the sign, the minus sign U+2212, a bare
  decimal part (``.5``) and a trailing period are understood (d1 reads ``1,234`` and ``70{,}000`` as 1 and
  70, ``\u22125`` as 5 and ``.5`` as 5); ``2, 5`` and ``18,5`` are not one number (their first number is
  read); scientific notation is not understood (d1's ``float`` reads ``1e3``); at most
  :data:`MAX_NUMBER_DIGITS` digits; comparison is exact instead of float equality;
* the completion is cut at the first end-of-text marker, and texts longer than
  :data:`daca_jax.tasks.text_scan.MAX_COMPLETION_CHARS` are not graded (bound hit, reward 0).

MATH500: :func:`extract_math_answer` follows d1's ``parse_math_answers``: the last ``\\boxed{...}``
(nested braces) of the completion, else the last non-empty answer span. Where this differs: an
unclosed last box (a truncated completion) falls back to the box before it (d1 then reads the first
answer span, box command included); empty boxes are skipped; the answer span is the last non-empty
one, as above; equivalence is decided by ``math_verify.parse`` / ``math_verify.verify`` instead of
d1's Hendrycks-MATH string normaliser (``is_equiv``), which misses equal forms such as ``0.5`` vs
``\\frac12``; answers longer than :data:`MAX_MATH_ANSWER_CHARS` are rejected.

math-verify bounds its work with ``signal.alarm``, which only works in a process's main thread, and a
single big-integer operation (e.g. a parsed ``10^{10^{10}}``) cannot be interrupted by a signal at
all. :class:`MathVerifier` therefore runs math-verify in a :class:`~daca_jax.tasks.grader_worker.
WorkerProcess` with a CPU-time limit per item (``timeout_s``, 0.8 s): the worker abandons an item at
the limit, or, stuck in native code, is killed by the caller and replaced by a fresh one; the item
counts as wrong and as a grader bound hit.

All text scans are linear in the completion's length (:mod:`daca_jax.tasks.text_scan`).
"""
from __future__ import annotations

import fractions
import re
from typing import Sequence

from daca_jax.tasks import grader_worker
from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks import text_scan
from daca_jax.tasks.text_scan import last_boxed  # noqa: F401  (re-exported: the graders' box reader)

# Longest number (digits, without separators) that is parsed; longer ones count as no number (and stay
# below Python's int-from-str limit of 4300 digits).
MAX_NUMBER_DIGITS = 64
# Longest extracted MATH answer that is handed to math-verify (gold MATH500 answers are <= 53 chars).
MAX_MATH_ANSWER_CHARS = 1000

# A number in running text: a sign and a dollar sign in either order, digits with or without comma groups of
# three, a decimal part, or a bare decimal part (``.5``).
_NUMBER_RE = re.compile(r"(?:-?\$|\$?-)?\s?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)")
# A whole answer: as above, groups of three also separated by single spaces, a leading '+'.
_WHOLE_NUMBER_RE = re.compile(r"[+-]?(?:(?:\d{1,3}(?:,\d{3})+|\d{1,3}(?: \d{3})+|\d+)(?:\.\d+)?|\.\d+)")
# LaTeX's ways of writing a thousands separator (``70{,}000``, ``70\,000``, ``70,\!000``) and a minus sign
# (U+2212), read as ``,`` and ``-``; ``\$`` is a dollar sign.
_LATEX_GROUP_RE = re.compile(r"(?<=\d)(?:\{,\}|,\\!|\\,|\\ |\\!)(?=\d{3}(?!\d))")


def normalize_numbers(text: str) -> str:
  """``text`` with LaTeX thousands separators as ``,``, U+2212 as ``-`` and ``\\$`` as ``$`` (linear time)."""
  return _LATEX_GROUP_RE.sub(",", text.replace("\u2212", "-").replace("\\$", "$"))


def parse_number(text: str) -> fractions.Fraction | None:
  """Exact value of a number written as in GSM8K (``-1,234.50``, ``$18``, ``18.``, ``.5``, ``70{,}000``,
  ``1 234``), else None.

  Thousands separators (groups of three only: ``2, 5`` and ``18,5`` are not one number), ``$``, a sign and
  one trailing period are understood (:func:`normalize_numbers` first); at most :data:`MAX_NUMBER_DIGITS`
  digits.
  """
  s = normalize_numbers(text).strip()
  s = s[:-1] if s.endswith(".") and not s.endswith("..") else s
  s = re.sub(r"^([+-]?)\s*\$\s*", r"\1", s)  # $18, -$18, - $ 18
  s = re.sub(r"^\$\s*([+-])\s*", r"\1", s)  # $-18
  if not _WHOLE_NUMBER_RE.fullmatch(s) or sum(c.isdigit() for c in s) > MAX_NUMBER_DIGITS:
    return None
  return fractions.Fraction(s.replace(",", "").replace(" ", "").lstrip("+"))


def _numbers(text: str) -> list[str]:
  return [m.group(0) for m in _NUMBER_RE.finditer(text)]


def _read_number(text: str, which: int) -> fractions.Fraction | None:
  """``text`` as a number if it is one, else its first (``which=0``) or last (``-1``) number."""
  whole = parse_number(text)
  if whole is not None:
    return whole
  found = _numbers(text)
  return parse_number(found[which]) if found else None


def _boxed_number(text: str) -> fractions.Fraction | None:
  """Rule 1 of :func:`extract_gsm8k_answer`: the first box that holds a number.

  Linear time: a box whose content holds no number is skipped together with every box nested in
  it (their contents are parts of it), so no text is read twice.
  """
  skip_until = -1
  for box in text_scan.boxes(text):
    if box.start < skip_until or box.content is None:
      continue
    content = box.content.strip()
    if not content:  # ``\boxed{}101``: the number was committed after the braces
      i = box.end
      while i < len(text) and text[i] in " \t":
        i += 1
      m = _NUMBER_RE.match(text, i)
      if m and (value := parse_number(m.group(0))) is not None:
        return value
      continue
    if content.strip(".") == "":  # d1 skips "..." placeholders
      continue
    value = _read_number(content, 0)
    if value is not None:
      return value
    skip_until = box.end
  return None


def extract_gsm8k_answer(completion: str, prompt_style: str = "chat",
                         last_number_fallback: bool = False) -> fractions.Fraction | None:
  """The numeric answer of a GSM8K completion (rules in the module docstring), or None.

  Args:
    completion: decoded completion (any string; longer than ``MAX_COMPLETION_CHARS``: None).
    prompt_style: ``"plain"`` also reads ``#### N`` first.
    last_number_fallback: when no rule finds an answer, take the completion's last number.
  """
  if text_scan.over_limit(completion):
    return None
  text = normalize_numbers(fmt.clean_completion(completion))
  if prompt_style == "plain" and "####" in text:
    after = _numbers(text.rsplit("####", 1)[1])
    return parse_number(after[0]) if after else None
  value = _boxed_number(text)
  if value is not None:
    return value
  span = fmt.last_answer(text)
  if span is not None:
    return _read_number(span, -1)
  if last_number_fallback:
    found = _numbers(text)
    return parse_number(found[-1]) if found else None
  return None


def gsm8k_gold(answer_field: str) -> fractions.Fraction | None:
  """The gold number of a GSM8K ``answer`` field (the text after ``####``), or None if absent."""
  if "####" not in answer_field:
    return None
  return parse_number(answer_field.rsplit("####", 1)[1])


def extract_math_answer(completion: str, prompt_style: str = "chat") -> str | None:
  """The answer span of a MATH completion (see module docstring), or None.

  For ``prompt_style="plain"`` a completion with neither box nor tag is its own answer (stripped).
  Spans longer than :data:`MAX_MATH_ANSWER_CHARS` (and completions longer than
  ``MAX_COMPLETION_CHARS``) are rejected (None).
  """
  if text_scan.over_limit(completion):
    return None
  text = fmt.clean_completion(completion)
  span = fmt.last_box_or_answer(text)
  if span is None and prompt_style == "plain":
    span = text
  if span is None:
    return None
  span = span.strip()
  return span if span and len(span) <= MAX_MATH_ANSWER_CHARS else None


def math_verify_equal(gold: str, answer: str, timeout_seconds: int | None = 2) -> bool:
  """Whether ``answer`` is equivalent to ``gold`` by math-verify (both LaTeX answer spans).

  Both are parsed as ``\\boxed{...}``; an answer that does not parse that way is parsed as free text
  (math-verify's default LaTeX + expression extraction). ``timeout_seconds`` is passed to
  math-verify (signal-based: only in a main thread; None disables it). Never raises.
  """
  import math_verify  # pylint: disable=import-outside-toplevel  (heavy: sympy)

  try:
    gold_parsed = math_verify.parse("\\boxed{" + gold + "}", parsing_timeout=timeout_seconds)
    pred = math_verify.parse("\\boxed{" + answer + "}", parsing_timeout=timeout_seconds)
    if not pred:
      pred = math_verify.parse(answer, parsing_timeout=timeout_seconds)
    if not gold_parsed or not pred:
      return False
    return bool(math_verify.verify(gold_parsed, pred, timeout_seconds=timeout_seconds))
  except Exception:  # pylint: disable=broad-except  (math-verify/sympy raise anything; wrong = 0)
    return False


class MathVerifier:
  """math-verify equivalence in a killable worker process (see module docstring).

  The worker is ``python -m daca_jax.tasks.math_verify_worker`` (a
  :class:`~daca_jax.tasks.grader_worker.WorkerProcess`), one JSON line per item.

  Args:
    timeout_s: CPU seconds per item (> 0), enforced in the worker; an item that needs more counts as
      wrong and as a grader bound hit.
    wall_timeout_s: wall-clock seconds per item before the worker is killed whatever it does. Native
      code (a huge integer power) ignores the CPU timer; the caller then kills the worker once it has
      used ``timeout_s`` + 0.15 s of CPU, so this only bounds a worker starved of CPU.
    math_verify_timeout: math-verify's own (wall-clock, ``signal.alarm``) limit per operation in
      whole seconds; 0 (default) leaves it off, as the CPU limit above does its job without depending
      on how loaded the machine is.
    memory_bytes: address-space cap of the worker (0 = no cap).
    startup_s: how long a fresh worker may take to start (sympy imports); not charged to any item.

  The worker starts lazily and is killed by :meth:`close`, garbage collection, or interpreter exit.
  """

  def __init__(self, timeout_s: float = 0.8, wall_timeout_s: float = 300.0,
               math_verify_timeout: int = 0, memory_bytes: int = 4 << 30, startup_s: float = 600.0):
    if not timeout_s > 0:
      raise ValueError(f"MathVerifier: timeout_s must be > 0, got {timeout_s}")
    self.timeout_s = float(timeout_s)
    self.math_verify_timeout = max(0, int(math_verify_timeout))
    self.memory_bytes = int(memory_bytes)
    self._worker = grader_worker.WorkerProcess(
        "daca_jax.tasks.math_verify_worker", (self.memory_bytes, self.math_verify_timeout),
        cpu_limit_s=self.timeout_s, wall_limit_s=wall_timeout_s, startup_s=startup_s)

  @property
  def num_timeouts(self) -> int:
    """Items that ran out of time since this verifier was built."""
    return self._worker.num_timeouts

  def verify(self, pairs: Sequence[tuple[str, str | None]]) -> list[tuple[bool, bool]]:
    """For each ``(gold, answer)``: ``(equivalent, bound_hit)``; a None answer is ``(False, False)``,
    an item that ran out of time ``(False, True)``."""
    asked = [i for i, (_, answer) in enumerate(pairs) if answer is not None]
    answers = self._worker.request_many([[str(pairs[i][0]), str(pairs[i][1])] for i in asked])
    out = [(False, False)] * len(pairs)
    for i, (status, response) in zip(asked, answers):
      out[i] = (status == grader_worker.OK and response == 1, status == grader_worker.TIMEOUT)
    return out

  def equal(self, pairs: Sequence[tuple[str, str | None]]) -> list[bool]:
    """For each ``(gold, answer)``: whether math-verify finds them equivalent (None answer: False)."""
    return [ok for ok, _ in self.verify(pairs)]

  def close(self) -> None:
    """Stops the worker (a later call starts a new one)."""
    self._worker.close()
