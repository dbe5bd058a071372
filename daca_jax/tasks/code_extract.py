"""Code of a completion, and the programs a code task runs it as (:mod:`daca_jax.tasks.code`, which
re-exports these names).

:func:`extract_code` reads the code out of a completion (python code fences found in linear time);
:func:`candidate_program` is what the CANDIDATE sandbox runs and :func:`test_suite` the trusted tests
the JUDGE sandbox runs (:mod:`daca_jax.tasks.sandbox.judge`).
"""
from __future__ import annotations

import re

from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks import text_scan
from daca_jax.tasks.base import Example
from daca_jax.tasks.sandbox import judge

_PY_TAGS = frozenset({"", "python", "python3", "py"})


def defines(code: str, name: str) -> bool:
  """Whether ``code`` has a ``def name(`` / ``class name`` line (at any indentation)."""
  pattern = rf"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+{re.escape(name)}\b"
  return re.search(pattern, code, re.MULTILINE) is not None


def extract_code(completion: str, entry_point: str | None = None) -> tuple[str, bool]:
  """Code of a completion, and whether it came from a complete python code fence.

  Order of preference: the last complete fence tagged python/py/python3 or untagged that defines
  ``entry_point``; else the last such fence; else the text after an unclosed opening fence (a
  generation cut short); else the whole completion. Text from the first end-of-text marker on is
  ignored (:func:`daca_jax.tasks.reasoning_format.clean_completion`). Fences are found in linear
  time (:func:`daca_jax.tasks.text_scan.code_fences`); a completion longer than
  ``text_scan.MAX_COMPLETION_CHARS`` yields no code (a grader bound hit).

  Args:
    completion: decoded model output (any string).
    entry_point: the function the tests call, if known.

  Returns:
    ``(code, fenced)``; never raises for any ``str``.
  """
  if text_scan.over_limit(completion):
    return "", False
  text = fmt.clean_completion(completion)
  blocks = [body for tag, body in text_scan.code_fences(text) if tag.lower() in _PY_TAGS]
  if blocks:
    if entry_point:
      defining = [b for b in blocks if defines(b, entry_point)]
      if defining:
        return defining[-1], True
    return blocks[-1], True
  opened = [start for tag, start in text_scan.fence_openings(text) if tag.lower() in _PY_TAGS]
  if opened:
    return text[opened[-1]:], False
  return text, False


def candidate_program(code: str, example: Example) -> str:
  """The program run in the candidate sandbox: ``code_header + code`` (never the tests).

  The header (imports, constants, helpers, then the entry point's signature and docstring) is itself
  valid Python, so this one layout serves both styles: a plain-style body continues the header's
  function; a chat-style complete function redefines it, while the header still supplies the
  imports and helpers that chat answers often omit.
  """
  return f"{example.meta['code_header']}{code}\n"


def test_suite(example: Example) -> judge.TestSuite:
  """The example's trusted tests (its header, test code and entry point; cached).

  Raises:
    ValueError: the header or test code is not valid Python.
  """
  meta = example.meta
  return judge.make_suite(meta["code_header"], meta["test"], meta["entry_point"])
