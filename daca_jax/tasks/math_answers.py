"""Answer extraction and grading for math word problems (GSM8K) and competition math (MATH500).

GSM8K: the answer is a number. :func:`extract_gsm8k_answer` reads it from the last complete
``<answer>...</answer>`` span if there is one (else from the whole completion), preferring, within that
text, the number after the last ``####``, then the last ``\\boxed{...}``, then the last number;
thousands separators, ``$`` and trailing periods are dropped. Correctness is exact rational
comparison (``fractions.Fraction``), so ``18``, ``18.0``, ``$18.`` and ``18.00`` all equal ``18``.

MATH500: :func:`extract_math_answer` takes the last ``\\boxed{...}`` (nested braces) inside the last
``<answer>`` span, else the whole span, else the last ``\\boxed{...}`` of the completion; equivalence
with the gold answer is decided by ``math_verify.parse`` / ``math_verify.verify``.

math-verify bounds its work with ``signal.alarm``, which only works in a process's main thread, and a
single big-integer operation (e.g. a parsed ``10^{10^{10}}``) cannot be interrupted by a signal at
all. :class:`MathVerifier` therefore runs math-verify in a separate worker process (its own main
thread, so math-verify's own timeouts work there) and the caller waits at most ``timeout_s`` per item:
a worker that does not answer in time is killed, the item counts as wrong, and a fresh worker is
started for the next one. The worker's address space is capped (``RLIMIT_AS``) so that a runaway
expression fails with MemoryError instead of exhausting the machine.
"""
from __future__ import annotations

import fractions
import json
import os
import pathlib
import re
import select
import subprocess
import sys
import weakref
from typing import Sequence

from daca_jax.tasks import reasoning_format as fmt

# Longest number (digits, without separators) that is parsed; longer ones count as no number (and stay
# below Python's int-from-str limit of 4300 digits).
MAX_NUMBER_DIGITS = 64
# Longest extracted MATH answer that is handed to math-verify (gold MATH500 answers are <= 53 chars).
MAX_MATH_ANSWER_CHARS = 1000

_NUMBER_RE = re.compile(r"-?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def parse_number(text: str) -> fractions.Fraction | None:
  """Exact value of a number written as in GSM8K (``-1,234.50``, ``$18``, ``18.``), else None.

  Thousands separators, ``$``, spaces and one trailing period are dropped; at most
  :data:`MAX_NUMBER_DIGITS` digits.
  """
  s = text.strip().replace(",", "").replace("$", "").replace(" ", "").rstrip(".")
  if not re.fullmatch(r"-?\d+(?:\.\d+)?", s) or sum(c.isdigit() for c in s) > MAX_NUMBER_DIGITS:
    return None
  return fractions.Fraction(s)


def last_boxed(text: str) -> str | None:
  """Content of the last balanced ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, else None.

  Braces nest; an unbalanced (e.g. truncated) last box falls back to the one before it. The
  ``\\boxed 5`` form (no braces) yields the text up to the next whitespace or ``$``.
  """
  starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)", text)]
  for start in reversed(starts):
    i = start
    while i < len(text) and text[i] == " ":
      i += 1
    if i < len(text) and text[i] == "{":
      depth = 0
      for j in range(i, len(text)):
        if text[j] == "{":
          depth += 1
        elif text[j] == "}":
          depth -= 1
          if depth == 0:
            return text[i + 1:j]
    elif i > start:
      m = re.match(r"[^\s$]+", text[i:])
      if m:
        return m.group(0)
  return None


def _numbers(text: str) -> list[str]:
  return [m.group(0) for m in _NUMBER_RE.finditer(text)]


def extract_gsm8k_answer(completion: str) -> fractions.Fraction | None:
  """The numeric answer of a GSM8K completion (see module docstring), or None."""
  text = fmt.clean_completion(completion)
  tagged = fmt.extract_answer_tag(text)
  scope = tagged if tagged is not None else text
  if "####" in scope:
    after = _numbers(scope.rsplit("####", 1)[1])
    return parse_number(after[0]) if after else None
  boxed = last_boxed(scope)
  if boxed is not None:
    found = _numbers(boxed)
    return parse_number(found[-1]) if found else None
  found = _numbers(scope)
  return parse_number(found[-1]) if found else None


def gsm8k_gold(answer_field: str) -> fractions.Fraction | None:
  """The gold number of a GSM8K ``answer`` field (the text after ``####``), or None if absent."""
  if "####" not in answer_field:
    return None
  return parse_number(answer_field.rsplit("####", 1)[1])


def extract_math_answer(completion: str, prompt_style: str = "chat") -> str | None:
  """The answer span of a MATH completion (see module docstring), or None.

  For ``prompt_style="plain"`` a completion with neither tag nor box is its own answer (stripped).
  Spans longer than :data:`MAX_MATH_ANSWER_CHARS` are rejected (None).
  """
  text = fmt.clean_completion(completion)
  tagged = fmt.extract_answer_tag(text)
  if tagged is not None:
    boxed = last_boxed(tagged)
    span = boxed if boxed is not None else tagged
  else:
    span = last_boxed(text)
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


def _stop(state: dict) -> None:
  proc = state.get("proc")
  if proc is not None:
    for stream in (proc.stdin, proc.stdout):
      try:
        stream.close()
      except OSError:
        pass
    if proc.poll() is None:
      proc.kill()
    proc.wait(5)
  state.clear()


class MathVerifier:
  """math-verify equivalence in a killable worker process (see module docstring).

  The worker is ``python -m daca_jax.tasks.math_verify_worker`` (a plain subprocess, not
  ``multiprocessing``, so it never re-imports the caller's ``__main__``), speaking one JSON line per
  item over its stdin/stdout.

  Args:
    timeout_s: wall-clock limit per item (seconds, > 0). The first item after a (re)start also gets
      ``startup_s`` for the worker's imports (sympy).
    math_verify_timeout: math-verify's own per-operation limit in the worker (whole seconds).
    memory_bytes: address-space cap of the worker (0 = no cap).
    startup_s: extra wait for the first item of a fresh worker.

  The worker starts lazily and is killed by :meth:`close`, garbage collection, or interpreter exit.
  """

  def __init__(self, timeout_s: float = 10.0, math_verify_timeout: int = 2,
               memory_bytes: int = 4 << 30, startup_s: float = 30.0):
    if not timeout_s > 0:
      raise ValueError(f"MathVerifier: timeout_s must be > 0, got {timeout_s}")
    self.timeout_s = float(timeout_s)
    self.math_verify_timeout = max(0, int(math_verify_timeout))
    self.memory_bytes = int(memory_bytes)
    self.startup_s = float(startup_s)
    self.num_timeouts = 0
    self._state: dict = {}
    self._finalizer = weakref.finalize(self, _stop, self._state)

  def _start(self) -> None:
    package_root = str(pathlib.Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", "daca_jax.tasks.math_verify_worker",
         str(self.memory_bytes), str(self.math_verify_timeout)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        start_new_session=True, text=True, bufsize=1)
    self._state.update(proc=proc, fresh=True)

  def _one(self, gold: str, answer: str) -> bool:
    for attempt in range(2):  # a worker that died between items (e.g. OOM-killed) is restarted once
      if not self._state:
        self._start()
      proc = self._state["proc"]
      wait = self.timeout_s + (self.startup_s if self._state.pop("fresh", False) else 0.0)
      try:
        proc.stdin.write(json.dumps([gold, answer]) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], wait)
        if not ready:
          self.num_timeouts += 1
          _stop(self._state)
          return False
        line = proc.stdout.readline()
        if line.strip() in ("0", "1"):
          return line.strip() == "1"
      except (OSError, ValueError):
        pass
      _stop(self._state)  # EOF or garbage: the worker died; retry once with a fresh one
      if attempt:
        return False
    return False

  def equal(self, pairs: Sequence[tuple[str, str | None]]) -> list[bool]:
    """For each ``(gold, answer)``: whether math-verify finds them equivalent (None answer: False)."""
    return [False if a is None else self._one(str(g), str(a)) for g, a in pairs]

  def close(self) -> None:
    """Stops the worker (a later call starts a new one)."""
    _stop(self._state)
