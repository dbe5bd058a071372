"""Grader bombs: hostile completions that made graders run for minutes; each is graded in <= 1 s.

Sizes (an unclosed ``<answer>`` repeated 125k times = 1 MB; the strict-format
pattern on 1 MB; an unbalanced ``\\boxed{`` x 20k; ``pattern: ^(a+)+$`` on 30 characters; a
backreference pattern; ``uniqueItems`` on 4000 objects; nested ``anyOf`` over a recursive ``$ref``),
plus the same shapes just under the completion-length cap, where the scanning code itself (not the
cap) has to be fast. Before the fix each took more than 60 s (27.7 s for the code fence).

Times are CPU seconds (``time.process_time``) of this process plus, for graders that work in a
worker process, the CPU seconds the worker reports: the cost of grading the completion, which does
not depend on how loaded the machine is (the CI machine shares its cores with long experiments, so
wall-clock times there say little). Wall-clock time is checked against the workers' backstops.
"""
from __future__ import annotations

import json
import time
from fractions import Fraction

import pytest

from daca_jax.tasks import grader_worker, make_task
from daca_jax.tasks.json_schema import parsing as jparse, validation as jv
from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks import sudoku_answers, text_scan
from daca_jax.tasks.base import Example
from daca_jax.tasks.code import extract_code
from daca_jax.tasks.json_schema import compact

LIMIT_S = 3.0  # CPU seconds; an unbounded bomb takes hours. (1.0 was hit at 1.01 s on a loaded machine.)
CAP = text_scan.MAX_COMPLETION_CHARS
_M = "\n</reasoning>\n<answer>\n"

UNCLOSED_1MB = "<answer>" * 125_000
STRICT_1MB = "<reasoning>\n" + _M * (1_000_000 // len(_M)) + "z"
BOXED_20K = "\\boxed{" * 20_000
# The same shapes, just under the cap: these reach the scanners.
UNDER_CAP = {
    "unclosed_answer": "<answer>" * (CAP // 8 - 1),
    "strict_separators": "<reasoning>\n" + _M * (CAP // len(_M) - 1) + "z",
    "soft_separators": "<reasoning>" + "</reasoning> <answer>" * (CAP // 21 - 1),
    "unbalanced_boxed": "\\boxed{" * (CAP // 7 - 1),
    "closing_braces": "}" * (CAP // 2) + "\\boxed{" * (CAP // 20),
    "empty_boxes_spaces": "\\boxed " * (CAP // 7 - 1),
    "fence_lines": "```python\n" * (CAP // 10 - 1),
    "fences_no_newline": "```" * (CAP // 3 - 1),
    "equals": "1=" * (CAP // 2 - 1),
    "expression_run": "1 " * (CAP // 2 - 10) + "= 5",
    "digits": "1" * (CAP - 1),
    "close_tags": "</answer>" * (CAP // 9 - 1),
    "spaces_then_close": "1" * 16 + " " * (CAP - 30) + "x",
    "numbers_commas": "1," * (CAP // 2 - 1),
    "nested_boxes": "\\boxed{" * (CAP // 16) + "x" + "}" * (CAP // 16),
    "nested_boxes_digit": "\\boxed{" * (CAP // 16) + "7" + "}" * (CAP // 16),
}
BIG = {"unclosed_answer_1mb": UNCLOSED_1MB, "strict_1mb": STRICT_1MB, "boxed_20k": BOXED_20K}


def _cpu(fn, *args):
  t0 = time.process_time()
  out = fn(*args)
  return out, time.process_time() - t0


# --------------------------------------------------------------------------- the scanners themselves
@pytest.mark.parametrize("text", list(BIG.values()) + list(UNDER_CAP.values()),
                         ids=list(BIG) + list(UNDER_CAP))
def test_scanners_are_linear(text):
  """Every scan a grader runs, on texts of up to 1 MB with no length cap applied."""
  scans = [lambda t: text_scan.tag_spans(t, "<answer>", "</answer>"), text_scan.boxes,
           text_scan.last_boxed, text_scan.code_fences, text_scan.fence_openings,
           fmt.strict_format_reward, fmt.soft_format_reward, jparse._strip_fence, jparse._nesting_depth,
           lambda t: fmt.strict_format_reward(t, "<reasoning>"), sudoku_answers._digits_before_close,
           sudoku_answers._free_standing_digits, lambda t: sudoku_answers._fenced_digits(t, 0)]
  for scan in scans:
    _, seconds = _cpu(scan, text)
    assert seconds <= LIMIT_S, (scan, seconds)


def test_the_issue_bombs_give_the_regex_answers():
  assert text_scan.tag_spans(UNCLOSED_1MB, "<answer>", "</answer>") == []
  assert fmt.strict_format_reward(STRICT_1MB) == 0.0 and fmt.soft_format_reward(STRICT_1MB) == 0.0
  assert text_scan.last_boxed(BOXED_20K) is None


# ------------------------------------------------------------------------------ the task graders
def _examples():
  gsm = Example(prompt="", target="", meta={"gold": Fraction(5), "gold_text": "5"})
  cd = Example(prompt="", target="", meta={"numbers": (30, 100, 93), "target": 23})
  sd = Example(prompt="", target="", meta={"puzzle": "3102200002100320", "solution": "3142243142131324"})
  js = Example(prompt="", target="", meta={"schema": compact({"type": "object"})})
  math = Example(prompt="", target="", meta={"gold": "5"})
  return {"gsm8k": gsm, "countdown": cd, "sudoku4x4": sd, "json_schema": js, "math500": math}


_TASKS = [("gsm8k", {"prompt_style": "chat"}), ("gsm8k", {"prompt_style": "plain"}),
          ("math500", {"prompt_style": "chat"}), ("countdown", {"prompt_style": "chat"}),
          ("countdown", {"prompt_style": "plain"}), ("sudoku4x4", {"prompt_style": "chat"}),
          ("sudoku4x4", {"prompt_style": "plain"}), ("json_schema", {"eval_size": 2})]


@pytest.fixture(scope="module")
def tasks():
  built = {f"{n}/{kw.get('prompt_style', 'plain')}": make_task(n, data_dir=None, **kw) for n, kw in _TASKS}
  yield built
  for task in built.values():
    for worker in (getattr(task, "_worker", None), getattr(getattr(task, "verifier", None), "_worker", None)):
      if worker is not None:
        worker.close()


def _graded_seconds(task, grade, *args):
  """``(grade(*args), CPU seconds of this process + of the task's grading worker, if any)``."""
  worker = getattr(task, "_worker", None) or getattr(getattr(task, "verifier", None), "_worker", None)
  if worker is not None:
    worker.last_cpu_s = 0.0
  out, seconds = _cpu(grade, *args)
  return out, seconds + (worker.last_cpu_s if worker is not None else 0.0)


@pytest.mark.parametrize("key", [f"{n}/{kw.get('prompt_style', 'plain')}" for n, kw in _TASKS])
def test_task_graders_bound_every_bomb(tasks, key):
  task = tasks[key]
  ex = _examples()[key.split("/")[0]]
  task.reward(["warm-up"], [ex])  # starts any worker outside the timed region
  for name, text in list(BIG.items()) + list(UNDER_CAP.items()):
    over_cap = len(text) > CAP
    for method in ("reward", "metrics"):
      out, seconds = _graded_seconds(task, getattr(task, method), [text], [ex])
      assert seconds <= LIMIT_S, (key, name, method, seconds)
      if method == "reward":
        assert out.tolist() == [0.0] or not over_cap, (key, name)
      else:
        assert out["grader_bound_hits"] == float(over_cap), (key, name, out)


def test_code_extraction_bounds_every_bomb():
  for name, text in list(BIG.items()) + list(UNDER_CAP.items()):
    (code, fenced), seconds = _cpu(extract_code, text, "f")
    assert seconds <= LIMIT_S, (name, seconds)
    assert (code, fenced) == ("", False) or len(text) <= CAP
  assert extract_code("```python\n" * 100_000) == ("", False)  # 1 MB: over the cap, not run


# ------------------------------------------------------------------------------ JSON-schema bombs
def _nested(depth: int):
  value = "leaf"
  for _ in range(depth):
    value = [value]
  return value


_RECURSIVE_ANYOF = {"anyOf": [
    {"anyOf": [{"anyOf": [{"type": "array", "items": {"$ref": "#"}},
                          {"type": "array", "items": {"$ref": "#"}}]},
               {"type": "array", "items": {"$ref": "#"}}]},
    {"type": "integer"}]}

JSON_BOMBS = [
    # (schema, instance, valid, bound_hit)
    ({"type": "string", "pattern": "^(a+)+$"}, "a" * 30 + "!", False, False),
    ({"type": "string", "pattern": "^(a|aa)+$"}, "a" * 5000 + "b", False, False),
    ({"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}},
      "additionalProperties": False}, {"a" * 30 + "!": 1}, False, False),
    ({"type": "object", "propertyNames": {"pattern": "^(x+x+)+y$"}}, {"x" * 40: 1}, False, False),
    ({"type": "array", "uniqueItems": True}, [{"a": i} for i in range(4000)], True, False),
    ({"type": "array", "uniqueItems": True}, [{"a": i} for i in range(4000)] + [{"a": 7}], False, False),
    ({"type": "array", "uniqueItems": True}, [[i, {"k": [i]}] for i in range(3000)], True, False),
    (_RECURSIVE_ANYOF, _nested(40), False, True),
    (_RECURSIVE_ANYOF, _nested(3), False, False),  # small: fully decided
    ({"$defs": {"n": {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/n"}}] * 6
                      + [{"type": "null"}]}}, "$ref": "#/$defs/n"}, _nested(12), False, True),
]


@pytest.mark.parametrize("schema,instance,valid,bound_hit", JSON_BOMBS)
def test_json_schema_bombs_in_process(schema, instance, valid, bound_hit):
  compiled = jv.compile_schema(schema)
  grade, seconds = _cpu(compiled.grade, json.dumps(instance))
  assert seconds <= LIMIT_S
  assert (grade.parsed, grade.valid, grade.bound_hit) == (True, valid, bound_hit)


def test_json_schema_bombs_through_the_task(tasks):
  task = tasks["json_schema/plain"]
  examples = [Example(prompt="", target="", meta={"schema": compact(s)}) for s, *_ in JSON_BOMBS]
  task.reward(["{}"], examples[:1])  # worker started
  for ex, (schema, instance, valid, bound_hit) in zip(examples, JSON_BOMBS):
    t0 = time.monotonic()
    m, seconds = _graded_seconds(task, task.metrics, [json.dumps(instance)], [ex])
    assert seconds <= LIMIT_S, (schema, seconds)
    assert time.monotonic() - t0 <= task._worker.wall_limit_s + task._worker.startup_s
    assert (m["schema_adherence"], m["grader_bound_hits"]) == (float(valid), float(bound_hit)), schema


@pytest.mark.parametrize("pattern", ["^(a*)*b\\1$", "(a)\\1", "(?=a)b", "(?<!a)b", "(?!a)"])
def test_backreference_and_lookaround_patterns_are_refused(tasks, pattern):
  """RE2 cannot express them; the schema is refused rather than run on a backtracking engine, and a
  completion graded against it scores 0."""
  schema = {"type": "string", "pattern": pattern}
  (error, seconds) = _cpu(lambda: pytest.raises(jv.SchemaCompileError, jv.compile_schema, schema))
  assert seconds <= LIMIT_S and error.value.reason == "regex"
  task = tasks["json_schema/plain"]
  ex = Example(prompt="", target="", meta={"schema": compact(schema)})
  (m, seconds) = _graded_seconds(task, task.metrics, [json.dumps("a" * 30)], [ex])
  assert seconds <= LIMIT_S and m["schema_adherence"] == 0.0 and m["validator_errors"] == 1.0


# ----------------------------------------------------------------------------------- the worker
def test_worker_cpu_limits_backstops_and_recovery():
  worker = grader_worker.WorkerProcess("tests._worker_probe", cpu_limit_s=0.5)
  try:
    assert worker.request(["echo", [1, "a"]]) == (grader_worker.OK, [1, "a"])
    generation = worker.generation
    # A Python loop: the worker's CPU timer abandons it and the same worker keeps serving.
    assert worker.request(["spin"]) == (grader_worker.TIMEOUT, None)
    assert 0.4 <= worker.last_cpu_s <= LIMIT_S and worker.generation == generation
    assert worker.request(["raise"]) == (grader_worker.OK, "failed")
    # One long C call ignores the CPU timer: the caller sees the worker's CPU time pass the limit by
    # 0.15 s and kills it; the next request gets a fresh worker.
    cpu_before = grader_worker._cpu_seconds(worker._state["proc"].pid)
    pid = worker._state["proc"].pid
    assert worker.request(["burn"]) == (grader_worker.TIMEOUT, None)
    assert worker.num_timeouts == 2 and worker.generation == -1  # stopped, not yet replaced
    assert grader_worker._cpu_seconds(pid) is None  # the process is gone
    assert cpu_before is not None
    assert worker.request(["echo", "again"]) == (grader_worker.OK, "again")
    assert worker.generation != generation
  finally:
    worker.close()
  # No CPU used at all (waiting): only the wall-clock limit stops it.
  worker = grader_worker.WorkerProcess("tests._worker_probe", cpu_limit_s=0.5, wall_limit_s=2.0)
  try:
    assert worker.request(["echo", 1]) == (grader_worker.OK, 1)
    t0 = time.monotonic()
    assert worker.request(["sleep", 600]) == (grader_worker.TIMEOUT, None)
    assert time.monotonic() - t0 < 2.0 + 8.0 and worker.num_timeouts == 1
    assert worker.request(["echo", "again"]) == (grader_worker.OK, "again")
  finally:
    worker.close()
