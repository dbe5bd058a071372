"""The bounds of one chat-template render: time, size of every value, nesting of calls.

A template from the internet is an untrusted program; :mod:`daca_jax.tasks.chat` explains the bounds and
why they run in-process. Here are the checks the sandboxed environment
(:mod:`daca_jax.tasks.chat_environment`) runs at every loop item, call, attribute or item access,
operator, filter and output chunk; a check that fails raises :class:`Exceeded`, which
:meth:`daca_jax.tasks.chat.ChatTemplate.render` turns into one ``DataError``.
"""
from __future__ import annotations

import functools
import itertools
import re
import threading
import time
from typing import Any, Mapping, Sequence

# Bounds of one render (a released template renders a prompt in about a millisecond, a few kB).
MAX_RENDER_SECONDS = 2.0
MAX_RENDER_CHARS = 1_000_000
# The largest integer a template may compute with ``**`` (bits): far beyond any token id or length.
MAX_INT_BITS = 4096
# Calls (macros, recursive loops, functions) a template may nest; released templates nest a few. Far
# below Python's recursion limit, so a recursive template is stopped within microseconds rather than
# after a thousand Python frames (whose unwinding alone can pass the time bound on a loaded host).
MAX_RENDER_DEPTH = 64

# .deadline: time.monotonic() by which the current render must end; .depth: calls now nested;
# .limit_s: the time bound the current render was given (its error message).
budget = threading.local()




def short_error(e: BaseException) -> str:
  return " ".join(str(e).split())[:200] or type(e).__name__


class Exceeded(Exception):
  """A render went over one of its bounds (caught by :meth:`ChatTemplate.render`)."""


def check_time() -> None:
  deadline = getattr(budget, "deadline", None)
  if deadline is not None and time.monotonic() > deadline:
    raise Exceeded(f"it runs longer than {getattr(budget, 'limit_s', MAX_RENDER_SECONDS)} s")


# What a value costs, in characters and items (:func:`_size`), above which a call is refused before it
# runs (its inputs already promise a result this large); its result is then checked exactly.
MAX_CALL_ESTIMATE = 10 * MAX_RENDER_CHARS


def _size(value: Any, limit: int = MAX_CALL_ESTIMATE) -> int:
  """Characters and items ``value`` holds, counted through nested containers and namespaces (a shared
  element counts every time it appears: that is what printing or joining the value costs); stops
  counting past ``limit`` (returns more than ``limit``) so that a huge value costs ``limit`` steps.

  ``len`` alone does not bound memory: ``[s] * 1000`` is 1000 items whose ``join``, ``string`` or
  ``tojson`` is 1000 times ``s``."""
  import jinja2.utils

  if isinstance(value, (str, bytes, range)):  # the common case, without the walk
    return len(value)
  total, stack = 0, [value]
  while stack and total <= limit:
    node = stack.pop()
    if isinstance(node, (str, bytes, range)):
      total += len(node)
      continue
    if isinstance(node, jinja2.utils.Namespace):
      stack.append(object.__getattribute__(node, "_Namespace__attrs"))
      continue
    if isinstance(node, dict):
      items: Any = itertools.chain(node.keys(), node.values())
    elif isinstance(node, (list, tuple, set, frozenset)):
      items = node
    else:
      total += 1
      continue
    total += len(node)
    for item in items:  # strings counted here, containers walked later: one pass over a flat list
      if isinstance(item, str):
        total += len(item)
        if total > limit:
          break
      elif isinstance(item, jinja2.utils.Namespace) or (isinstance(item, _CONTAINERS) and item):
        stack.append(item)
  return total


_CONTAINERS = (list, tuple, set, frozenset, dict)


def _weight(value: Any, limit: int = MAX_CALL_ESTIMATE) -> int:
  """How much an argument can multiply a result: an integer by its magnitude (a width, a count),
  anything else by its :func:`_size` (either counted up to just past ``limit``)."""
  if isinstance(value, int) and not isinstance(value, bool):
    return min(abs(value), limit + 1)
  return _size(value, limit)


def _format_widths(fmt: Any) -> int:
  """An upper bound of the padding a ``%`` / ``str.format`` format string asks for: the sum of every
  number written in it (``'%999999999d'``, ``'{:>999999999}'``) whatever the rest of the spec says."""
  if not isinstance(fmt, str):
    return 0
  return sum(min(int(d), MAX_CALL_ESTIMATE + 1) for d in _DIGITS.findall(fmt[:MAX_RENDER_CHARS]))


_DIGITS = re.compile(r"\d{1,12}")


def check_estimate(base: Any, others: Sequence[Any], fmt: Any = None) -> None:
  """Refuses an operation on ``base`` with arguments ``others`` before it runs when its result could
  exceed :data:`MAX_CALL_ESTIMATE`: at most ``size(base) x (1 + sum of the others' weights + format
  widths)`` (``s.replace('', s)``, ``s|indent(10**6)``, ``'%999999999d' % 1``, ``lines|join(s)``)."""
  factor = 1 + _format_widths(fmt)
  for a in others:
    factor += _weight(a, MAX_CALL_ESTIMATE)
  # Each size is counted only as far as the bound needs (a walk costs what it counts).
  if factor > MAX_CALL_ESTIMATE or max(_weight(base, MAX_CALL_ESTIMATE // factor), 1) * factor > MAX_CALL_ESTIMATE:
    raise Exceeded(f"it calls a function whose result could hold more than {MAX_CALL_ESTIMATE} characters or "
                    "items")


def check_size(value: Any) -> Any:
  """``value`` unless it holds more than :data:`MAX_RENDER_CHARS` characters and items (:func:`_size`)."""
  if not isinstance(value, (int, float, bool, type(None))) and _size(value, MAX_RENDER_CHARS) > MAX_RENDER_CHARS:
    raise Exceeded(f"it builds a value of more than {MAX_RENDER_CHARS} items or characters")
  return value


def check_args(args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
  """No integer argument large enough to allocate past the bound (``'x'.ljust(10**9)``, ``center``)."""
  for a in (*args, *kwargs.values()):
    if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_RENDER_CHARS:
      raise Exceeded(f"it passes {a if abs(a) < 10**30 else 'a huge integer'} to a function (more than "
                      f"{MAX_RENDER_CHARS})")


def _data_args(args: Sequence[Any]) -> Sequence[Any]:
  """``args`` of a filter without the Jinja context / environment some filters are passed first."""
  import jinja2.nodes
  import jinja2.runtime

  skip = (jinja2.runtime.Context, jinja2.nodes.EvalContext, jinja2.Environment)
  i = 0
  while i < len(args) and isinstance(args[i], skip):
    i += 1
  return args[i:]


def bounded_filter(f: Any) -> Any:
  """Filter ``f`` with the render's bounds checked on its arguments (before it runs) and its result."""

  @functools.wraps(f)  # keeps jinja's pass_context / pass_environment marks
  def bounded(*args: Any, **kwargs: Any) -> Any:
    check_time()
    data = _data_args(args)
    check_args(data[1:], kwargs)
    if data:
      check_estimate(data[0], (*data[1:], *kwargs.values()), data[0] if f.__name__ == "do_format" else None)
    return check_size(f(*args, **kwargs))

  return bounded


def bounded_concat(parts: Sequence[Any]) -> str:
  """``a ~ b ~ ...`` and the text of a ``{% set %}`` block or a macro, refused before it is joined
  when longer than :data:`MAX_RENDER_CHARS` (a block's or macro's output never reaches the output
  check of :meth:`ChatTemplate.render`, and ``s ~ s ~ ... ~ s`` multiplies a string in one node)."""
  check_time()
  parts = list(parts)
  if sum(_size(p, MAX_RENDER_CHARS) for p in parts) > MAX_RENDER_CHARS:
    raise Exceeded(f"it builds a value of more than {MAX_RENDER_CHARS} items or characters")
  return "".join(map(str, parts))


def finalize(value: Any) -> Any:
  """Every ``{{ value }}``, checked before it is turned into text (``str`` of a list holding one long
  string many times would be the product)."""
  check_time()
  return check_size(value)


def bounded_iter(items: Any) -> Any:
  """``items`` one by one, the time bound checked at each (a loop with an empty body over a long
  string calls nothing else)."""
  for item in items:
    check_time()
    yield item


def binop_size(operator: str, left: Any, right: Any) -> None:
  """Refuses ``*`` / ``+`` / ``**`` / ``%`` whose result would exceed the bounds, before computing it."""
  seq = (str, list, tuple)
  if operator == "*":
    if (isinstance(left, int) and isinstance(right, int)  # squaring in a loop doubles the bits each item
        and abs(left).bit_length() + abs(right).bit_length() > MAX_INT_BITS):
      raise Exceeded(f"it computes an integer of more than {MAX_INT_BITS} bits")
    for a, n in ((left, right), (right, left)):
      if (isinstance(a, seq) and isinstance(n, int) and n > 0
          and _size(a, MAX_RENDER_CHARS // n) * n > MAX_RENDER_CHARS):
        raise Exceeded(f"it repeats a value to more than {MAX_RENDER_CHARS} items or characters")
  elif operator == "+" and isinstance(left, seq) and isinstance(right, seq):
    if _size(left, MAX_RENDER_CHARS) + _size(right, MAX_RENDER_CHARS) > MAX_RENDER_CHARS:
      raise Exceeded(f"it concatenates to more than {MAX_RENDER_CHARS} items or characters")
  elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
    if right > 0 and abs(left).bit_length() * right > MAX_INT_BITS:
      raise Exceeded(f"it computes an integer of more than {MAX_INT_BITS} bits")
  elif operator == "%" and isinstance(left, str):  # printf-style formatting: widths in the string or args
    check_args(right if isinstance(right, tuple) else (right,), {})
    check_estimate(left, right if isinstance(right, tuple) else (right,), left)
