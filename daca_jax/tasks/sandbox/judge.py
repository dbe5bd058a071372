"""Judged runs: unforgeable verdicts on untrusted code (see the threat model in
:mod:`daca_jax.tasks.sandbox.runner`).

A judged run starts two sandboxes (:mod:`daca_jax.tasks.sandbox.runner`) joined by pipes:

* the CANDIDATE sandbox runs the untrusted program (e.g. a problem's header + a model's code), then
  answers calls ``name(*args, **kwargs)`` with plain values (:func:`rpc.serve`); it never
  sees the tests or the expected values;
* the JUDGE sandbox runs only trusted code -- the problem's header and its test code, rewritten so
  that every check is strict (:func:`rewrite_test`) -- with each function under test
  replaced by a proxy that ships the arguments to the candidate and decodes the reply with
  :func:`values.decode` (exact builtin types only, so no object of the candidate's making
  ever reaches a comparison). The judge writes its verdict to a pipe only it holds.

The verdict is ``passed`` only if the tests ran to their end, made at least one call, and no call
failed and no strict check was refused along the way (even one the test code caught). Nothing the
candidate prints, exits with, or does inside its sandbox can write that pipe: the two sandboxes are
separate PID, IPC, network and mount namespaces, and Landlock confines each one's files.
"""
from __future__ import annotations

import ast
import builtins
import concurrent.futures
import dataclasses
import functools
import json
import marshal
import os
import pathlib
import time
import warnings
from typing import Sequence

from daca_jax.errors import ConfigError
from daca_jax.tasks.sandbox import rpc, runner
from daca_jax.tasks.sandbox.runner import ERROR, FAILED, PASSED, TIMEOUT, SandboxLimits, SandboxResult

_HERE = pathlib.Path(__file__).parent
# How long the candidate may take to end by itself once the judge has finished (it sees EOF).
_CANDIDATE_EXIT_S = 0.5

_WRAPPER = "__daca_check__"
# The program of either sandbox: the two modules (compiled here, marshalled) and a call.
_BOOT = """
import marshal, sys
def _load(name, code):
  module = type(sys)(name)
  sys.modules[name] = module
  exec(code, module.__dict__)
  return module
for _name in ("daca_jax", "daca_jax.tasks", "daca_jax.tasks.sandbox"):
  sys.modules[_name] = type(sys)(_name)
  sys.modules[_name].__path__ = []
sys.modules["daca_jax"].tasks = sys.modules["daca_jax.tasks"]
sys.modules["daca_jax.tasks"].sandbox = sys.modules["daca_jax.tasks.sandbox"]
_values_code, _rpc_code = marshal.loads(_MODULES)
sys.modules["daca_jax.tasks.sandbox"].values = _load("daca_jax.tasks.sandbox.values", _values_code)
_rpc = _load("daca_jax.tasks.sandbox.rpc", _rpc_code)
del _MODULES, _values_code, _rpc_code
_rpc.{entry}(_CONFIG)
"""


@dataclasses.dataclass(frozen=True)
class TestSuite:
  """The trusted part of a judged run.

  Attributes:
    header: code the judge runs before the tests (the problem's imports and helpers, e.g.
      HumanEval's ``poly``); the candidate program usually starts with it too.
    test: test code; it calls the functions under test by name or through ``check(candidate)``.
    entry_point: the main function under test.
    functions: every name the judge proxies to the candidate: ``entry_point`` and whatever the test
      calls without defining it (and the header does not define).
  """

  header: str
  test: str
  entry_point: str
  functions: tuple[str, ...]


class _Strict(ast.NodeTransformer):
  def visit_Compare(self, node: ast.Compare) -> ast.AST:
    self.generic_visit(node)
    ops = [type(op).__name__ for op in node.ops]
    if len(ops) == 1:
      call = ast.Call(ast.Name(rpc.COMPARE, ast.Load()),
                      [node.left, ast.Constant(ops[0]), node.comparators[0]], [])
    else:  # later operands stay lazy, as in a chained comparison
      lazy = [ast.Lambda(ast.arguments([], [], None, [], [], None, []), c)
              for c in node.comparators]
      call = ast.Call(ast.Name(rpc.CHAIN, ast.Load()),
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
  return ast.copy_location(ast.Call(ast.Name(rpc.TRUTH, ast.Load()), [node], []), node)


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
  """The test code's module AST with strict checks: every comparison becomes a call of the judge's
  strict helper (``==``, ``!=``, ``in`` by :func:`values.same`; chained comparisons stay
  lazy) and every ``assert`` demands a real ``bool`` (see :mod:`daca_jax.tasks.sandbox.rpc`).

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


def _top_level_names(code: str) -> set[str]:
  names = set()
  for node in ast.parse(code).body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      names.add(node.name)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
  return names


@functools.lru_cache(maxsize=4096)
def make_suite(header: str, test: str, entry_point: str) -> TestSuite:
  """Checks trusted test code and builds its :class:`TestSuite` (cached).

  Raises:
    ValueError: ``header`` or ``test`` is not valid Python, or ``entry_point`` is not an
      identifier; the message says which.
  """
  if not isinstance(entry_point, str) or not entry_point.isidentifier():
    raise ValueError(f"entry_point={entry_point!r} is not a Python identifier")
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      header_names = _top_level_names(header)
  except SyntaxError as e:
    raise ValueError(f"the header is not valid Python: {e}") from None
  try:
    with warnings.catch_warnings():  # e.g. invalid escapes in docstrings are the data's business
      warnings.simplefilter("ignore")
      _test_code(test, entry_point)
      called = called_names(test)
  except SyntaxError as e:
    raise ValueError(f"the test code is not valid Python: {e}") from None
  functions = {entry_point} | (called - header_names)
  return TestSuite(header, test, entry_point, tuple(sorted(functions)))


@functools.lru_cache(maxsize=None)
def _modules() -> bytes:
  """The in-sandbox modules, compiled once (the sandboxes run this same interpreter)."""
  return marshal.dumps(tuple(
      compile((_HERE / f"{name}.py").read_text(), f"<daca_jax.tasks.sandbox.{name}>", "exec")
      for name in ("values", "rpc")))


@functools.lru_cache(maxsize=4096)
def _test_code(test: str, entry_point: str) -> bytes:
  return marshal.dumps(compile(rewrite_test(test, entry_point), "<test>", "exec"))


def _program(entry: str, config: dict) -> str:
  return (f"_MODULES = {_modules()!r}\n_CONFIG = {config!r}\n" + _BOOT.replace("{entry}", entry))


def _read_verdict(fd: int) -> dict | None:
  os.set_blocking(fd, False)
  try:
    raw = os.read(fd, 1 << 16)
  except OSError:
    return None
  try:
    verdict = json.loads(raw.decode("utf-8", errors="replace"))
  except ValueError:
    return None
  if (type(verdict) is not dict or type(verdict.get("passed")) is not bool
      or type(verdict.get("message")) is not str or type(verdict.get("calls")) is not int):
    return None
  return verdict


def run_judged(candidate: str, suite: TestSuite,
               limits: SandboxLimits | None = None) -> SandboxResult:
  """Runs ``candidate`` (a program defining the functions under test) against ``suite``.

  Args:
    candidate: untrusted program text (any string).
    suite: the trusted tests (:func:`make_suite`).
    limits: limits of EACH of the two sandboxes (the wall clock runs from their start).

  Returns:
    A :class:`SandboxResult`: ``passed`` (the judge's verdict), ``failed`` (message: the failed
    assert's line, or what the candidate did wrong), ``timeout``, or ``error`` (a sandbox could not
    start). ``stdout``/``stderr`` are the candidate's; the isolation flags hold for both sandboxes.
    Never raises for anything the candidate does.

  Raises:
    ConfigError: ``limits`` is not a :class:`SandboxLimits` or ``suite`` not a :class:`TestSuite`.
  """
  limits = SandboxLimits() if limits is None else limits
  if not isinstance(limits, SandboxLimits):
    raise ConfigError("sandbox.limits", limits, "a SandboxLimits")
  if not isinstance(suite, TestSuite):
    raise ConfigError("sandbox.suite", suite, "a TestSuite (make_suite)")
  text = candidate if isinstance(candidate, str) else str(candidate)
  to_judge_r, to_judge_w = os.pipe()
  to_candidate_r, to_candidate_w = os.pipe()
  verdict_r, verdict_w = os.pipe()
  cand = runner._Run(  # pylint: disable=protected-access
      _program("serve", {"source": text, "read_fd": to_candidate_r, "write_fd": to_judge_w}),
      limits, pass_fds=(to_candidate_r, to_judge_w))
  judge = runner._Run(  # pylint: disable=protected-access
      _program("judge", {"header": suite.header, "test": suite.test,
                         "test_code": _test_code(suite.test, suite.entry_point),
                         "functions": list(suite.functions),
                         "read_fd": to_judge_r, "write_fd": to_candidate_w,
                         "verdict_fd": verdict_w}),
      limits, pass_fds=(to_judge_r, to_candidate_w, verdict_w))
  try:
    cand.start()
    judge.start()
    judge_ended = judge.wait()
    judge_result = judge.finish(timed_out=not judge_ended)
    cand_ended = cand.wait(min(_CANDIDATE_EXIT_S,
                               cand.start_time + limits.timeout_s + 0.5 - time.monotonic()))
    cand_result = cand.finish(timed_out=not cand_ended)
    verdict = _read_verdict(verdict_r)
  finally:
    os.close(verdict_r)
  return _combine(judge_result, cand_result, cand, verdict)


def _combine(judge: SandboxResult, cand: SandboxResult, cand_run: "runner._Run",
             verdict: dict | None) -> SandboxResult:
  flags = {f: getattr(judge, f) and getattr(cand, f)
           for f in ("network_isolated", "filesystem_isolated", "read_isolated", "proc_isolated",
                     "process_limited")}
  make = functools.partial(SandboxResult, duration_s=judge.duration_s, stdout=cand.stdout,
                           stderr=cand.stderr, **flags)
  if judge.status == ERROR:
    return make(ERROR, f"judge: {judge.message}")
  if cand_run.proc is None or cand_run.report.get("setup_error"):
    return make(ERROR, f"candidate: {cand.message}")
  if verdict is not None and verdict["passed"] and judge.status == PASSED:
    return make(PASSED, f"ok ({verdict['calls']} calls)")
  if judge.status == TIMEOUT:
    return make(TIMEOUT, f"{judge.message} (the judge was still waiting on the candidate or "
                         "running its tests)")
  if verdict is None:
    return make(FAILED, f"the judge ended without a verdict: {judge.message}")
  return make(FAILED, verdict["message"])


def run_judged_many(candidates: Sequence[str], suites: Sequence[TestSuite],
                    limits: SandboxLimits | None = None, *,
                    max_workers: int | None = None) -> list[SandboxResult]:
  """:func:`run_judged` over pairs, concurrently (a thread pool; each run holds two sandboxes).

  Raises:
    ConfigError: lengths differ or ``max_workers`` is not a positive int.
  """
  workers = runner.check_max_workers(max_workers)
  if len(candidates) != len(suites):
    raise ConfigError("sandbox.suites", f"<{len(suites)} suites>",
                      f"one per candidate ({len(candidates)})")
  if not candidates:
    return []
  with concurrent.futures.ThreadPoolExecutor(max_workers=min(workers, len(candidates))) as pool:
    return list(pool.map(lambda pair: run_judged(pair[0], pair[1], limits),
                         zip(candidates, suites)))

