"""Linear-time scanning of untrusted completion text: tag spans, ``\\boxed{}`` contents, number runs.

The graders read answers out of model output, which an RL run (or a hostile model) can make
arbitrarily awkward. Regular expressions with lazy quantifiers and no anchor, such as
``<answer>(.*?)</answer>``, rescan the rest of the text from every candidate start: an unclosed
``<answer>`` repeated 125k times (1 MB) takes minutes. Every helper here does its job with
``str.find`` / ``str.startswith`` and at most one pass over the text, so its time is linear in the
length of the text (each docstring says which regular expression it replaces, and the tests compare
the two on random text).

Graders also refuse texts longer than :data:`MAX_COMPLETION_CHARS` before any parsing (such a
completion scores 0 and is counted as a grader bound hit by the task's metrics).
"""
from __future__ import annotations

import dataclasses
import re

# Longest completion (characters) any grader reads. Real completions are far shorter: gen_length
# tokens of at most a few dozen characters each (d1 evaluates 128..512 tokens).
MAX_COMPLETION_CHARS = 100_000


def over_limit(text: object, max_chars: int = MAX_COMPLETION_CHARS) -> bool:
  """Whether ``text`` is not a string or is longer than ``max_chars`` (then it is not graded)."""
  return not isinstance(text, str) or len(text) > max_chars


def tag_spans(text: str, open_tag: str, close_tag: str) -> list[tuple[int, int]]:
  """``(start, end)`` of the content of each ``open_tag ... close_tag`` pair, left to right.

  The spans are those of ``re.finditer(re.escape(open_tag) + "(.*?)" + re.escape(close_tag), text,
  re.DOTALL)`` (non-overlapping, each closed by the first ``close_tag`` after its opening), found in
  linear time: once an opening tag has no closing tag after it, no later one can have either.

  Args:
    text: any string.
    open_tag, close_tag: non-empty tag strings, e.g. ``"<answer>"`` and ``"</answer>"``.

  Returns:
    ``[(start, end)]`` with ``text[start:end]`` the content of each span.
  """
  spans = []
  pos = 0
  while True:
    start = text.find(open_tag, pos)
    if start < 0:
      return spans
    start += len(open_tag)
    end = text.find(close_tag, start)
    if end < 0:
      return spans
    spans.append((start, end))
    pos = end + len(close_tag)


def matching_braces(text: str) -> dict[int, int]:
  """Maps the index of every ``{`` that has a matching ``}`` to that ``}``'s index (one pass, a stack).

  ``}`` without an open ``{`` are ignored; ``{`` left open at the end have no entry.
  """
  match: dict[int, int] = {}
  stack: list[int] = []
  for m in _BRACE_RE.finditer(text):
    if m.group() == "{":
      stack.append(m.start())
    elif stack:
      match[stack.pop()] = m.start()
  return match


_BRACE_RE = re.compile(r"[{}]")
_BOX_COMMANDS = ("\\boxed", "\\fbox")


@dataclasses.dataclass(frozen=True)
class Box:
  """One ``\\boxed``/``\\fbox`` command found by :func:`boxes`.

  Attributes:
    start: index of the backslash.
    end: index just after the box (after its closing brace, or after the space-form run); the end
      of the command when the content is incomplete.
    content_start, content_end: ``text[content_start:content_end]`` is the content; both -1 when it
      is incomplete (see :func:`boxes`).
    text: the scanned text (not copied; :attr:`content` slices it on demand, so nested boxes cost
      no copies).
  """

  start: int
  end: int
  content_start: int
  content_end: int
  text: str = dataclasses.field(repr=False)

  @property
  def content(self) -> str | None:
    """The boxed text, or None when it is incomplete."""
    return None if self.content_start < 0 else self.text[self.content_start:self.content_end]


def boxes(text: str) -> list[Box]:
  """Every ``\\boxed`` / ``\\fbox`` in ``text``, in order, with its content.

  Content: after optional spaces, a ``{...}`` group with nested braces balanced (None when its
  closing brace is missing, e.g. a truncated completion); or, for the ``\\boxed 5`` form (spaces and
  no brace), the text up to the next whitespace or ``$``; None for a command followed by neither.
  Linear time: braces are matched in one pass (:func:`matching_braces`), the space-form runs of
  different commands do not overlap (a run holds no whitespace, so no command inside it can start
  another space-form run), and contents are not copied.
  """
  found = []
  for command in _BOX_COMMANDS:
    pos = text.find(command)
    while pos >= 0:
      found.append((pos, pos + len(command)))
      pos = text.find(command, pos + 1)
  if not found:
    return []
  found.sort()
  braces = matching_braces(text)
  out = []
  n = len(text)
  for pos, start in found:
    i = start
    while i < n and text[i] == " ":
      i += 1
    span, end = (-1, -1), start
    if i < n and text[i] == "{":
      close = braces.get(i)
      if close is not None:
        span, end = (i + 1, close), close + 1
    elif i > start:
      j = i
      while j < n and not (text[j].isspace() or text[j] == "$"):
        j += 1
      if j > i:
        span, end = (i, j), j
    out.append(Box(pos, end, span[0], span[1], text))
  return out


def last_boxed(text: str) -> str | None:
  """Content of the last ``\\boxed``/``\\fbox`` whose content is complete, else None.

  An unbalanced (e.g. truncated) last box falls back to the one before it.
  """
  for box in reversed(boxes(text)):
    if box.content is not None:
      return box.content
  return None


_FENCE_TAG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+.-")


def _fence_tag(text: str, start: int) -> str:
  """The info-string tag after the backticks at ``start``: spaces/tabs, then ``[A-Za-z0-9_+.-]*``."""
  i = start + 3
  while i < len(text) and text[i] in " \t":
    i += 1
  j = i
  while j < len(text) and text[j] in _FENCE_TAG_CHARS:
    j += 1
  return text[i:j]


def _opening(text: str, pos: int) -> tuple[int, int] | None:
  """``(start, body_start)`` of the first opening fence line at or after ``pos``, else None."""
  start = text.find("```", pos)
  if start < 0:
    return None
  newline = text.find("\n", start + 3)
  return None if newline < 0 else (start, newline + 1)


def code_fences(text: str) -> list[tuple[str, str]]:
  """``(tag, body)`` of each complete Markdown code fence, left to right.

  The matches of ``re.findall(r"```[ \\t]*([A-Za-z0-9_+.-]*)[^\\n]*\\n(.*?)```", text, re.DOTALL)``
  in linear time: an opening fence whose line has no newline, or whose body has no closing fence,
  ends the scan, since no later opening could have one either.
  """
  out = []
  pos = 0
  while (opening := _opening(text, pos)) is not None:
    start, body = opening
    close = text.find("```", body)
    if close < 0:
      break
    out.append((_fence_tag(text, start), text[body:close]))
    pos = close + 3
  return out


def fence_openings(text: str) -> list[tuple[str, int]]:
  """``(tag, body_start)`` of each opening fence line: the matches of
  ``re.finditer(r"```[ \\t]*([A-Za-z0-9_+.-]*)[^\\n]*\\n", text)``, in linear time."""
  out = []
  pos = 0
  while (opening := _opening(text, pos)) is not None:
    out.append((_fence_tag(text, opening[0]), opening[1]))
    pos = opening[1]
  return out
