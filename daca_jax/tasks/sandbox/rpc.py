"""The two programs of a judged sandbox run.

Standard library only (plus :mod:`daca_jax.tasks.sandbox.values`): the harness
(:mod:`daca_jax.tasks.sandbox.judge`) sends this module (compiled) into two sandboxes, one running
:func:`serve` (the candidate: untrusted code) and one running :func:`judge` (trusted code only: the
problem's header and its tests, rewritten into strict checks by
:func:`daca_jax.tasks.sandbox.judge.rewrite_test`). They talk through two pipes, one JSON line per
message:

* judge -> candidate: ``["call", name, args, kwargs]``, the arguments as plain values;
* candidate -> judge: first ``["ready", ok, error]``, then per call ``["value", v]`` or
  ``["raised", exception_name, message]``.

The judge's verdict goes to a third pipe only the judge holds. The candidate can send any bytes;
the judge decodes them with :func:`values.decode` (exact builtin types only) and a message
of the wrong shape is a failure. The strict helpers (:meth:`_Judge.compare`, :meth:`_Judge.truth`)
make ``==``, ``!=`` and ``in`` use :func:`values.same`, refuse bools and NaN in ordered
comparisons, and demand a real ``bool`` in every ``assert``.
"""
from __future__ import annotations

import builtins
import json
import marshal
import operator
import os
import sys

from daca_jax.tasks.sandbox import values

MAX_MESSAGE_BYTES = 4 << 20
# Names of the strict helpers in the rewritten test code (judge.rewrite_test).
CHAIN, COMPARE, TRUTH = "__daca_chain__", "__daca_compare__", "__daca_truth__"
_ORDER = {"Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt, "GtE": operator.ge}


class CandidateError(BaseException):
  """The candidate failed a call (raised, ended, sent something not plain data). A BaseException,
  so a test's ``except Exception`` cannot swallow it."""


class StrictError(BaseException):
  """A check the strict rules refuse (a non-bool assert, comparing a bool or NaN by order)."""


# --- the channel ---------------------------------------------------------------------------------
class Channel:
  """JSON lines over a pair of pipe fds, each line at most :data:`MAX_MESSAGE_BYTES`."""

  def __init__(self, read_fd: int, write_fd: int):
    self.read_fd, self.write_fd = read_fd, write_fd
    self.buffer = b""

  def send(self, text: str) -> None:
    data = memoryview((text + "\n").encode("ascii"))
    while data:
      data = data[os.write(self.write_fd, data):]

  def receive(self) -> str | None:
    """The next line, ``None`` at end of file; raises CandidateError for an over-long line."""
    chunks, size, found = [self.buffer], len(self.buffer), b"\n" in self.buffer
    while not found:
      if size > MAX_MESSAGE_BYTES:
        raise CandidateError(f"a message longer than {MAX_MESSAGE_BYTES} bytes")
      chunk = os.read(self.read_fd, 1 << 16)
      if not chunk:
        return None
      chunks.append(chunk)
      size += len(chunk)
      found = b"\n" in chunk
    line, _, self.buffer = b"".join(chunks).partition(b"\n")
    if len(line) > MAX_MESSAGE_BYTES:
      raise CandidateError(f"a message longer than {MAX_MESSAGE_BYTES} bytes")
    return line.decode("ascii", errors="replace")


# --- the candidate side (untrusted) --------------------------------------------------------------
def serve(config: dict) -> None:
  """Runs the candidate's code, then answers calls until the judge closes its pipe."""
  channel = Channel(config["read_fd"], config["write_fd"])
  namespace = {"__name__": "__candidate__", "__builtins__": builtins}
  try:
    exec(compile(config["source"], "<candidate>", "exec"), namespace)
  except BaseException as e:  # SystemExit too: the code ended before it could be tested
    channel.send(json.dumps(["ready", False, _describe(e)]))
    return
  channel.send(json.dumps(["ready", True, ""]))
  while True:
    line = channel.receive()
    if line is None:
      return
    _, name, args, kwargs = values.decode(line)
    try:
      fn = namespace.get(name)
      if fn is None:
        raise NameError(f"name {name!r} is not defined")
      reply = '["value",' + values.encode(fn(*args, **kwargs)) + "]"
    except BaseException as e:
      reply = json.dumps(["raised", type(e).__name__, _describe(e)])
    channel.send(reply)


def _describe(e: BaseException) -> str:
  try:
    text = f"{type(e).__name__}: {e}"
  except BaseException:
    text = type(e).__name__
  return text[:500]


# --- the judge side (trusted) --------------------------------------------------------------------
class _Judge:
  def __init__(self, channel: Channel):
    self.channel = channel
    self.calls = 0
    self.failure = ""  # the first candidate/strictness failure, even if a test swallowed it

  def fail(self, exc: BaseException) -> BaseException:
    if not self.failure:
      self.failure = str(exc)
    return exc

  def ready(self) -> None:
    message = self._receive("before its code ran")
    if type(message) is not list or len(message) != 3 or message[0] != "ready":
      raise self.fail(CandidateError("the candidate did not start properly"))
    if message[1] is not True:
      detail = message[2] if type(message[2]) is str else ""
      raise self.fail(CandidateError(f"the candidate's code failed to run: {detail[:300]}"))

  def _receive(self, when: str) -> object:
    try:
      line = self.channel.receive()
    except CandidateError as e:
      raise self.fail(e)
    if line is None:
      raise self.fail(CandidateError(f"the candidate process ended {when}"))
    try:
      return values.decode(line)
    except values.PlainDataError as e:
      raise self.fail(CandidateError(f"the candidate sent something that is not plain data: {e}"))

  def proxy(self, name: str):
    def call(*args, **kwargs):
      try:
        request = values.encode(["call", name, list(args), dict(kwargs)])
      except values.PlainDataError as e:  # the test's own arguments: a data problem
        raise StrictError(f"the test passes {name} an argument that is not plain data: {e}")
      self.calls += 1
      try:
        self.channel.send(request)
      except OSError:  # a closed pipe: the candidate process is gone
        raise self.fail(CandidateError(f"the candidate process ended before call {self.calls}"))
      message = self._receive(f"during call {self.calls} ({name})")
      if type(message) is list and len(message) == 2 and message[0] == "value":
        return message[1]
      if (type(message) is list and len(message) == 3 and message[0] == "raised"
          and type(message[1]) is str and type(message[2]) is str):
        raise self.fail(CandidateError(f"{name}(...) raised {message[2][:300]}"))
      raise self.fail(CandidateError("the candidate sent a reply of the wrong shape"))

    call.__name__ = call.__qualname__ = name
    return call

  def truth(self, v: object) -> bool:
    if type(v) is not bool:
      raise self.fail(StrictError(f"an assert got a {type(v).__name__}, not a bool"))
    return v

  def compare(self, left: object, op: str, right: object) -> bool:
    if values.has_nan(left) or values.has_nan(right):
      raise self.fail(StrictError(f"a comparison ({op}) with a NaN"))
    if op in ("Eq", "NotEq"):
      return values.same(left, right) == (op == "Eq")
    if op in ("Is", "IsNot"):
      return (left is right) == (op == "Is")
    if op in ("In", "NotIn"):
      return _contains(right, left) == (op == "In")
    if op not in _ORDER:
      raise StrictError(f"unknown comparison {op}")
    if type(left) is bool or type(right) is bool:
      raise self.fail(StrictError(f"a bool compared by order ({op})"))
    result = _ORDER[op](left, right)
    if type(result) is not bool:  # e.g. a trusted type's rich comparison
      raise self.fail(StrictError(f"a comparison ({op}) that gave a {type(result).__name__}"))
    return result

  def chain(self, left: object, ops: tuple, *rights) -> bool:
    for op, right in zip(ops, rights):
      value = right()
      if not self.compare(left, op, value):
        return False
      left = value
    return True


def _contains(container: object, item: object) -> bool:
  t = type(container)
  if t is str and type(item) is str:
    return item in container
  if t is bytes and type(item) is bytes:
    return item in container
  if t is dict:
    container = list(container)
  elif t not in (list, tuple, set, frozenset):
    return item in container  # a trusted container type (decode never makes one)
  return any(values.same(item, x) for x in container)


def judge(config: dict) -> None:
  """Runs the header and the rewritten tests with the candidate's functions as proxies; writes
  ``{"passed": bool, "calls": int, "message": str}`` to ``config["verdict_fd"]``."""
  verdict = {"passed": False, "calls": 0, "message": ""}
  state = _Judge(Channel(config["read_fd"], config["write_fd"]))
  try:
    namespace = {"__name__": "__test__", "__builtins__": builtins}
    exec(compile(config["header"], "<header>", "exec"), namespace)
    state.ready()
    for name in config["functions"]:
      namespace[name] = state.proxy(name)
    namespace.update({COMPARE: state.compare, CHAIN: state.chain, TRUTH: state.truth})
    exec(marshal.loads(config["test_code"]), namespace)  # compiled by the harness
    if state.failure:
      verdict["message"] = state.failure
    elif not state.calls:
      verdict["message"] = "the tests never called the candidate"
    else:
      verdict["passed"] = True
      verdict["message"] = "ok"
  except AssertionError:
    verdict["message"] = state.failure or f"assertion failed: {_failed_line(config['test'])}"
  except (CandidateError, StrictError) as e:
    verdict["message"] = state.failure or str(e)
  except BaseException as e:
    verdict["message"] = state.failure or f"the test raised {_describe(e)}"
  verdict["calls"] = state.calls
  verdict["message"] = verdict["message"][:1000]
  os.write(config["verdict_fd"], (json.dumps(verdict) + "\n").encode())


def _failed_line(test: str) -> str:
  tb, number = sys.exc_info()[2], 0
  while tb is not None:
    if tb.tb_frame.f_code.co_filename == "<test>":
      number = tb.tb_lineno
    tb = tb.tb_next
  lines = test.splitlines()
  text = lines[number - 1].strip() if 0 < number <= len(lines) else "?"
  return f"line {number}: {text[:300]}"
