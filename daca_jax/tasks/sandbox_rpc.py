"""The two programs of a judged sandbox run, and the rewrite of test code into strict checks.

Standard library only (plus :mod:`daca_jax.tasks.sandbox_values`): the harness
(:mod:`daca_jax.tasks.sandbox_judge`) sends this module's text into two sandboxes, one running
:func:`serve` (the candidate: untrusted code) and one running :func:`judge` (trusted code only: the
problem's header and tests). They talk through two pipes, one JSON line per message:

* judge -> candidate: ``["call", name, args, kwargs]``, the arguments as plain values;
* candidate -> judge: first ``["ready", ok, error]``, then per call ``["value", v]`` or
  ``["raised", exception_name, message]``.

The judge's verdict goes to a third pipe only the judge holds. The candidate can send any bytes;
the judge decodes them with :func:`sandbox_values.decode` (exact builtin types only) and a message
of the wrong shape is a failure.

:func:`rewrite_test` makes a test's checks strict (it runs in the harness to validate test code
when a task loads, and again in the judge): every comparison goes through :func:`compare` (``==``,
``!=`` and ``in`` with :func:`sandbox_values.same`; ``<``... refuse bools and NaN), and every
``assert`` demands a real ``bool`` (``assert candidate(x)`` with a non-empty list fails).
"""
from __future__ import annotations

import ast
import builtins
import json
import operator
import os
import sys
import traceback

from daca_jax.tasks import sandbox_values as values

MAX_MESSAGE_BYTES = 4 << 20
_CHAIN, _COMPARE, _TRUTH = "__daca_chain__", "__daca_compare__", "__daca_truth__"
_WRAPPER = "__daca_check__"
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
    while b"\n" not in self.buffer:
      if len(self.buffer) > MAX_MESSAGE_BYTES:
        raise CandidateError(f"a message longer than {MAX_MESSAGE_BYTES} bytes")
      chunk = os.read(self.read_fd, 1 << 16)
      if not chunk:
        return None
      self.buffer += chunk
    line, _, self.buffer = self.buffer.partition(b"\n")
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
      self.channel.send(request)
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
    namespace.update({_COMPARE: state.compare, _CHAIN: state.chain, _TRUTH: state.truth})
    tree = rewrite_test(config["test"], config["entry_point"])
    exec(compile(tree, "<test>", "exec"), namespace)
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
  frames = [f for f in traceback.extract_tb(sys.exc_info()[2]) if f.filename == "<test>"]
  if not frames:
    return "?"
  lines = test.splitlines()
  number = frames[-1].lineno or 0
  text = lines[number - 1].strip() if 0 < number <= len(lines) else "?"
  return f"line {number}: {text[:300]}"


# --- the test rewrite ----------------------------------------------------------------------------
class _Strict(ast.NodeTransformer):
  def visit_Compare(self, node: ast.Compare) -> ast.AST:
    self.generic_visit(node)
    ops = [type(op).__name__ for op in node.ops]
    if len(ops) == 1:
      call = ast.Call(ast.Name(_COMPARE, ast.Load()),
                      [node.left, ast.Constant(ops[0]), node.comparators[0]], [])
    else:  # later operands stay lazy, as in a chained comparison
      lazy = [ast.Lambda(ast.arguments([], [], None, [], [], None, []), c)
              for c in node.comparators]
      call = ast.Call(ast.Name(_CHAIN, ast.Load()),
                      [node.left, ast.Tuple([ast.Constant(o) for o in ops], ast.Load()), *lazy], [])
    return ast.copy_location(call, node)

  def visit_Assert(self, node: ast.Assert) -> ast.AST:
    self.generic_visit(node)
    node.test = _truth(node.test)
    return node


def _truth(node: ast.expr) -> ast.expr:
  if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
    node.operand = _truth(node.operand)
    return node
  if isinstance(node, ast.BoolOp):
    node.values = [_truth(v) for v in node.values]
    return node
  if isinstance(node, ast.Constant) and type(node.value) is bool:
    return node
  return ast.copy_location(ast.Call(ast.Name(_TRUTH, ast.Load()), [node], []), node)


def _rename_check(tree: ast.Module) -> None:
  """A test whose function under test is named ``check`` (2 MBPP rows) defines its own ``check``
  wrapper too; the wrapper is renamed so the asserts reach the candidate's ``check``."""
  for node in tree.body:
    if isinstance(node, ast.FunctionDef) and node.name == "check":
      node.name = _WRAPPER
    elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
          and isinstance(node.value.func, ast.Name) and node.value.func.id == "check"):
      node.value.func.id = _WRAPPER


def rewrite_test(test: str, entry_point: str) -> ast.Module:
  """The test code's module AST with strict checks (see the module docstring).

  Raises:
    SyntaxError: ``test`` is not valid Python.
  """
  tree = ast.parse(test, "<test>")
  if entry_point == "check":
    _rename_check(tree)
  tree = _Strict().visit(tree)
  return ast.fix_missing_locations(tree)


def called_names(test: str) -> set[str]:
  """Names the test calls directly (``name(...)``) without defining, assigning or importing them."""
  tree = ast.parse(test, "<test>")
  bound = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      bound.add(node.name)
    elif isinstance(node, ast.arg):
      bound.add(node.arg)
    elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
      bound.add(node.id)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
  calls = {n.func.id for n in ast.walk(tree)
           if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
  return calls - bound - set(dir(builtins))
