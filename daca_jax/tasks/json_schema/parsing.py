"""Parsing a completion as one JSON value, within bounds (the ``json_schema`` task's first grading step).

The completion, cut at the first end-of-text marker (as every grader cuts it) and stripped of surrounding
whitespace (and of one enclosing Markdown code fence), must be a single JSON value accepted by ``json.loads``.
Refused as not JSON, because two readers of the text could disagree on its value: ``NaN``/``Infinity``, a
number that overflows a double (``1e400`` reads as infinity), and an object with a repeated key (``json.loads``
keeps the last value, a first-wins reader the first; RFC 8259 §4 leaves it open). Texts longer than
:data:`daca_jax.tasks.text_scan.MAX_COMPLETION_CHARS` or nested deeper than :data:`MAX_JSON_DEPTH` fail
before parsing (linear scans). :mod:`daca_jax.tasks.json_schema.validation` re-exports the public names.
"""
from __future__ import annotations

import json
import math
from typing import Any

from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks import text_scan

MAX_JSON_DEPTH = 64  # parse_json bound on [ / { nesting (json.loads recurses)


def _reject_constant(name: str) -> Any:
  raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
  value = float(text)
  if math.isinf(value):
    raise ValueError(f"{text[:40]} overflows a double")
  return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  out = dict(pairs)
  if len(out) != len(pairs):
    raise ValueError("an object repeats a key")
  return out


def _nesting_depth(text: str) -> int:
  """Largest ``[``/``{`` nesting depth outside strings (linear scan, no recursion)."""
  depth = best = 0
  in_str = escaped = False
  for ch in text:
    if in_str:
      if escaped:
        escaped = False
      elif ch == "\\":
        escaped = True
      elif ch == '"':
        in_str = False
    elif ch == '"':
      in_str = True
    elif ch in "[{":
      depth += 1
      best = max(best, depth)
    elif ch in "]}":
      depth -= 1
  return best


def _strip_fence(text: str) -> str:
  """The body of one enclosing Markdown fence, else ``text``: the decision of
  ``re.fullmatch(r"```[A-Za-z0-9_-]*\\s*\\n(.*?)\\n?```", text, re.DOTALL)`` in linear time (the
  body starts after the last newline of the whitespace after the tag)."""
  if len(text) < 6 or not text.startswith("```") or not text.endswith("```"):
    return text
  i = 3
  while i < len(text) and text[i].isascii() and (text[i].isalnum() or text[i] in "_-"):
    i += 1
  j = i
  while j < len(text) and text[j].isspace():
    j += 1
  newline = text.rfind("\n", i, j)
  end = len(text) - 3
  if newline < 0 or newline + 1 > end:
    return text
  body = text[newline + 1:end]
  return body[:-1] if body.endswith("\n") else body


def parse_json(text: Any, max_chars: int = text_scan.MAX_COMPLETION_CHARS,
               max_depth: int = MAX_JSON_DEPTH) -> tuple[bool, Any]:
  """Parses a completion as one JSON value, within size and depth bounds.

  Args:
    text: the decoded completion (any object; non-strings fail).
    max_chars: longer texts fail without parsing.
    max_depth: deeper ``[``/``{`` nesting fails without parsing (``json.loads`` recurses).

  Returns:
    ``(True, value)`` on success, else ``(False, None)``. Never raises.
  """
  if text_scan.over_limit(text, max_chars):
    return False, None
  text = fmt.clean_completion(text).strip()
  stripped = _strip_fence(text)
  if stripped is not text:
    text = stripped.strip()
  if not text or _nesting_depth(text) > max_depth:
    return False, None
  try:
    return True, json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                            object_pairs_hook=_unique_keys)
  except (ValueError, RecursionError, TypeError):  # JSONDecodeError, int-digit limit, bad constants
    return False, None
