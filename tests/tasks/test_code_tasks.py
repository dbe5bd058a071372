"""Tests for the code tasks (daca_jax.tasks.code): HumanEval and MBPP graded in the sandbox.

Oracles: HumanEval's canonical solutions (must all pass), stub bodies and swapped solutions (must
fail), MBPP solutions written here for a few real test rows, and the structure of Drift's MBPP
records (which header defines which function) for the behaviour of every MBPP row under a stub.
Hostile programs: tests/tasks/test_sandbox_judge.py.
"""
from __future__ import annotations

import json
import re
import string
import time

import hypothesis
import hypothesis.strategies as st
import numpy as np
import pytest

from daca_jax.data import local
from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks import code
from daca_jax.tasks.sandbox import judge as sandbox_judge, readview as sandbox_readview, runner as sandbox
from daca_jax.tasks.base import TASKS, make_task
from daca_jax.tasks.code import HumanEvalTask, MBPPTask, candidate_program, extract_code

MBPP_DIR = local.default_data_dir() / "mbpp"
needs_mbpp = pytest.mark.skipif(not (MBPP_DIR / "test.json").is_file(),
                                reason=f"MBPP data not found at {MBPP_DIR} (see shared/data/SOURCES.md)")


@pytest.fixture(scope="module", autouse=True)
def _one_time_probes():
  # Probed once per process (cached): done here so that timing bounds measure grading.
  sandbox.process_limit_mode()
  sandbox_readview.read_rules()


# Generous per-program limits: these tests are about verdicts, and a loaded machine starves
# sandboxes (a correct program takes well under a second).
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def he_plain():
  return HumanEvalTask(prompt_style="plain", data_dir=None, timeout_s=TIMEOUT_S)


@pytest.fixture(scope="module")
def he_chat():
  return HumanEvalTask(prompt_style="chat", data_dir=None, timeout_s=TIMEOUT_S)


def _fence(body: str, before: str = "Here is the code:\n", after: str = "\nDone.") -> str:
  return f"{before}```python\n{body}```{after}"


# --- HumanEval -----------------------------------------------------------------------------------
def test_humaneval_canonical_solutions_all_pass(he_plain):
  examples, source = he_plain.eval_examples()
  assert len(examples) == 164 and "164 problems" in source
  start = time.monotonic()
  results = he_plain.run_tests([ex.target for ex in examples], examples)
  metrics = he_plain.metrics([ex.target for ex in examples], examples)  # cached results
  elapsed = time.monotonic() - start
  print(f"HumanEval canonical solutions: pass@1={metrics['pass@1']} in {elapsed:.1f} s "
        f"({sandbox.isolation_summary()})")
  failed = {ex.meta["task_id"]: r.message for ex, r in zip(examples, results) if r.status != "passed"}
  assert not failed
  assert metrics == {"pass@1": 1.0, "format_rate": 0.0, "timeout_rate": 0.0,
                     "sandbox_error_rate": 0.0, "grader_bound_hits": 0.0, "num_examples": 164.0}
  assert all(r.message.startswith("ok (") for r in results)  # the judge's verdict, with its calls
  assert elapsed < 300


def test_humaneval_chat_answers_pass_with_format_reward(he_chat):
  examples = he_chat.eval_examples()[0][:10]
  # A chat answer is a complete function in a fence: the SFT target, with text around it.
  completions = [_fence(ex.target[len("```python\n"):-3]) for ex in examples]
  np.testing.assert_allclose(he_chat.reward(completions, examples), 1.1, rtol=1e-6)
  # The same code without the fence passes but earns no format reward.
  bare = [ex.target[len("```python\n"):-3] for ex in examples]
  np.testing.assert_allclose(he_chat.reward(bare, examples), 1.0)


def test_humaneval_wrong_code_fails(he_plain):
  examples = he_plain.eval_examples()[0][:12]
  stubs = ["    return None\n"] * len(examples)
  assert he_plain.reward(stubs, examples).tolist() == [0.0] * len(examples)
  # Each problem given the next problem's canonical body.
  swapped = [examples[(i + 1) % len(examples)].target for i in range(len(examples))]
  assert he_plain.reward(swapped, examples).tolist() == [0.0] * len(examples)
  # Exiting with 0 before the tests run is not a pass.
  hacks = ["    import sys\n    sys.exit(0)\n", "    import os\n    os._exit(0)\n",
           "    raise SystemExit\n"]
  n = len(hacks)
  assert he_plain.reward(hacks, examples[:n]).tolist() == [0.0] * n
  hack_at_top = ["import sys\nsys.exit(0)\n"] * n
  assert he_plain.reward(hack_at_top, examples[:n]).tolist() == [0.0] * n


def test_humaneval_every_stub_fails_in_one_run(he_plain):
  # All 164 test suites really test something: a stub body fails each (one trusted program that
  # runs every problem in a fresh namespace, to keep this fast).
  examples = he_plain.eval_examples()[0]
  outcome = _run_each(_trusted_program("    return None\n", ex) for ex in examples)
  assert all(o != "ok" for o in outcome), [ex.meta["task_id"] for ex, o in zip(examples, outcome)
                                           if o == "ok"]


def test_humaneval_prompt_and_target_fit(he_plain, he_chat):
  for task in (he_plain, he_chat):
    examples = task.eval_examples()[0]
    prompts = task.encode_prompts(examples)
    assert prompts.shape == (164, task.prompt_len)
    targets = task.encode_targets(examples, task.min_gen_length)
    assert (targets == task.tokenizer.eos_id).any(axis=1).all()
    assert task.decode_completions(targets) == [ex.target for ex in examples]
  assert he_plain.eval_examples()[0][0].prompt.startswith("from typing import List")
  assert he_chat.eval_examples()[0][0].prompt.startswith("<|start_header_id|>user")  # BOS is an id


@needs_mbpp
def test_humaneval_train_prompts_come_from_mbpp_train():
  task = HumanEvalTask(prompt_style="plain", data_dir="")
  train = task.train_examples(471, seed=0)
  assert len({ex.meta["task_id"] for ex in train}) == 471
  assert all(ex.meta["task_id"].startswith("mbpp/train/") for ex in train)
  assert all(ex.prompt == ex.meta["code_header"] for ex in train)  # HumanEval layout: header only
  assert [ex.meta["task_id"] for ex in task.train_examples(5, seed=3)] == [
      ex.meta["task_id"] for ex in task.train_examples(5, seed=3)]
  with pytest.raises(DataError, match="sft.num_train_examples"):
    task.train_examples(472, seed=0)  # one of the 472 train records has a broken header


def test_humaneval_without_mbpp_has_no_training_data():
  with pytest.raises(DataError, match="data.data_dir"):
    HumanEvalTask(data_dir=None).train_examples(1, seed=0)


# --- MBPP ----------------------------------------------------------------------------------------
# Solutions written for this test for real MBPP test rows (index in test.json -> function source).
_MBPP_SOLUTIONS = {
    0: ("def remove_Occ(s, ch):\n    i = s.find(ch)\n    if i < 0:\n        return s\n"
        "    s = s[:i] + s[i + 1:]\n    j = s.rfind(ch)\n    return s if j < 0 else s[:j] + s[j + 1:]\n"),
    1: "def sort_matrix(M):\n    return sorted(M, key=sum)\n",
    2: "def count_common(words):\n    return Counter(words).most_common(4)\n",  # header imports it
    3: "def find_Volume(l, b, h):\n    return (l * b * h) / 2\n",
    # Drift's header here is the helper str_to_list; the tests call remove_dirty_chars.
    7: "def remove_dirty_chars(string, second):\n    return ''.join(c for c in string if c not in second)\n",
}


@pytest.fixture(scope="module")
def mbpp_chat():
  if not (MBPP_DIR / "test.json").is_file():
    pytest.skip(f"MBPP data not found at {MBPP_DIR}")
  return MBPPTask(prompt_style="chat", data_dir="", timeout_s=TIMEOUT_S)


@needs_mbpp
def test_mbpp_correct_solutions_pass_and_wrong_ones_fail(mbpp_chat):
  examples = mbpp_chat.eval_examples()[0]
  rows = sorted(_MBPP_SOLUTIONS)
  chosen = [examples[i] for i in rows]
  assert [ex.meta["entry_point"] for ex in chosen] == [
      "remove_Occ", "sort_matrix", "count_common", "find_Volume", "remove_dirty_chars"]
  good = [_fence(_MBPP_SOLUTIONS[i]) for i in rows]
  np.testing.assert_allclose(mbpp_chat.reward(good, chosen), 1.1, rtol=1e-6)
  wrong = good[1:] + good[:1]  # each row given another row's solution
  np.testing.assert_allclose(mbpp_chat.reward(wrong, chosen), 0.1, rtol=1e-6)
  metrics = mbpp_chat.metrics(good + wrong, chosen + chosen)
  assert metrics["pass@1"] == 0.5 and metrics["format_rate"] == 1.0
  assert metrics["num_examples"] == 10.0


@needs_mbpp
def test_mbpp_plain_bodies_continue_the_header():
  task = MBPPTask(prompt_style="plain", data_dir="", timeout_s=TIMEOUT_S)
  examples = task.eval_examples()[0]
  assert examples[3].prompt.endswith("def find_Volume(l,b,h) : \n"
                                     '    """ Write a python function to find the volume of a '
                                     'triangular prism.\n    """\n')
  assert examples[3].target == ""  # Drift's MBPP files have no reference code
  bodies = ["    return (l * b * h) / 2\n", "    return l * b * h\n"]
  assert task.reward(bodies, [examples[3]] * 2).tolist() == [1.0, 0.0]


@needs_mbpp
def test_mbpp_every_test_row_behaves_as_its_structure_says(mbpp_chat):
  # No row passes with a stub body. The failure is an AssertionError where the header defines the
  # asserted function, a NameError where Drift's header holds a helper instead, and a
  # RecursionError where the asserted function is itself named `check` (the test's own name) when
  # header, code and tests share one namespace (the judge renames the test's wrapper instead).
  examples, source = mbpp_chat.eval_examples()
  assert len(examples) == 498 and "498 problems" in source
  outcome = _run_each(_trusted_program("    return None\n", ex) for ex in examples)
  expected = []
  for ex in examples:
    if ex.meta["entry_point"] == "check":
      expected.append("RecursionError")
    elif code.defines(ex.meta["code_header"], ex.meta["entry_point"]):
      expected.append("AssertionError")
    else:
      expected.append("NameError")
  assert outcome == expected
  assert expected.count("NameError") == 17 and expected.count("RecursionError") == 2


@needs_mbpp
def test_mbpp_rows_testing_a_function_named_check_can_pass(mbpp_chat):
  examples = mbpp_chat.eval_examples()[0]
  rows = [examples[45], examples[337]]
  assert [ex.meta["entry_point"] for ex in rows] == ["check", "check"]
  good = [_fence("def check(n):\n    return 2 * int(str(n)[::-1]) == n + 1\n"),
          _fence("def check(s):\n    return 'Yes' if s and set(s) <= {'0', '1'} else 'No'\n")]
  results = mbpp_chat.run_tests(good, rows)
  assert [r.status for r in results] == ["passed", "passed"], results
  assert mbpp_chat.reward(good[::-1], rows).tolist() == pytest.approx([0.1, 0.1])


def test_mbpp_without_data_raises_a_clear_error():
  task = MBPPTask(data_dir=None)
  with pytest.raises(DataError, match="mbpp/test.json"):
    task.eval_examples()


def test_mbpp_record_errors_name_the_record(tmp_path):
  bad = tmp_path / "bad.json"
  bad.write_text(json.dumps([{"question": "q", "prefix": "def f(x):\n  pass\n",
                              "test_list": ["def check(candidate):\n  assert f(1)\n"]}]))
  with pytest.raises(DataError, match=r"record 0: the test program must end by calling check"):
    MBPPTask(eval_path=str(bad), data_dir=None).eval_examples()


# --- extraction ----------------------------------------------------------------------------------
_prose = st.text(alphabet=string.printable, max_size=80).filter(lambda s: "```" not in s)
# A body ending in a backtick would merge with the closing fence; code never has one at its end.
_body = st.text(alphabet=string.printable.replace("`", ""), max_size=200)


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(before=_prose, body=_body, after=_prose,
                  tag=st.sampled_from(["python", "py", "Python3", ""]))
def test_extract_code_returns_the_fenced_body(before, body, after, tag):
  text = f"{before}\n```{tag}\n{body}```{after}"
  assert extract_code(text) == (body, True)


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(text=st.text(max_size=300))
def test_extract_code_never_raises(text):
  got, fenced = extract_code(text, "f")
  assert isinstance(got, str) and isinstance(fenced, bool)
  if "```" not in text and "<|" not in text:
    assert (got, fenced) == (text, False)


def test_extract_code_preferences():
  two = "```python\ndef g():\n  pass\n```\n```python\nx = 1\n```"
  assert extract_code(two, "g") == ("def g():\n  pass\n", True)  # the block defining the entry
  assert extract_code(two, "h") == ("x = 1\n", True)  # else the last one
  assert extract_code("```js\nvar a;\n```\n```python\ny = 2\n```") == ("y = 2\n", True)
  assert extract_code("intro\n```python\ndef f():\n  return 1") == ("def f():\n  return 1", False)
  assert extract_code("```python\nz = 3\n```<|eot_id|>```python\nw = 4\n```") == ("z = 3\n", True)
  assert extract_code("plain code") == ("plain code", False)


# --- graders never raise -------------------------------------------------------------------------
_MALFORMED = ["", "```", "```python\n", "\x00\x00", "\ud800 lone surrogate", "def (((", "```python\n```",
              "    return " + "(" * 500, "\n" * 1000, "é" * 3000, "```python\nimport os\nos.abort()\n```"]


def test_graders_handle_malformed_completions(he_chat):
  examples = he_chat.eval_examples()[0][:len(_MALFORMED)]
  rewards = he_chat.reward(_MALFORMED, examples)
  assert rewards.dtype == np.float32 and rewards.shape == (len(_MALFORMED),)
  assert set(rewards.tolist()) <= {0.0, np.float32(0.1)}
  metrics = he_chat.metrics(_MALFORMED, examples)
  assert metrics["pass@1"] == 0.0 and metrics["sandbox_error_rate"] == 0.0


@hypothesis.settings(max_examples=4, deadline=None)
@hypothesis.given(st.lists(st.text(max_size=120), min_size=1, max_size=6))
def test_graders_never_raise_on_random_completions(completions):
  task = HumanEvalTask(prompt_style="chat", data_dir=None, timeout_s=TIMEOUT_S)
  examples = task.eval_examples()[0][:len(completions)]
  rewards = task.reward(completions, examples)
  assert rewards.shape == (len(completions),)
  assert set(rewards.tolist()) <= {0.0, np.float32(0.1)}


def test_results_are_cached_between_reward_and_metrics(he_plain, monkeypatch):
  calls = []
  real = sandbox_judge.run_judged_many

  def counting(candidates, *args, **kwargs):
    calls.append(len(candidates))
    return real(candidates, *args, **kwargs)

  monkeypatch.setattr(sandbox_judge, "run_judged_many", counting)
  task = HumanEvalTask(prompt_style="plain", data_dir=None, timeout_s=TIMEOUT_S)
  examples = task.eval_examples()[0][:3]
  completions = [examples[0].target, "    return 0\n", "    return 0\n"]
  task.reward(completions, examples)
  task.metrics(completions, examples)
  assert calls == [3, 0]
  with pytest.raises(ValueError, match="2 completions for 3 examples"):
    task.reward(completions[:2], examples)


def test_candidate_program_holds_no_tests(he_plain):
  ex = he_plain.eval_examples()[0][0]
  program = candidate_program("    return True\n", ex)
  assert program == ex.meta["code_header"] + "    return True\n\n"
  assert "def check" not in program and "assert" not in program


def test_bad_test_code_is_a_data_error_naming_the_problem(tmp_path):
  bad = tmp_path / "bad.jsonl"
  bad.write_text(json.dumps({"task_id": "X/1", "prompt": "def f(x):\n    'doc'\n",
                             "canonical_solution": "    return x\n", "entry_point": "f",
                             "test": "def check(candidate):\n    assert candidate(1) ==\n"}) + "\n")
  with pytest.raises(DataError, match=r"problem X/1: the test code is not valid Python"):
    HumanEvalTask(eval_path=str(bad), data_dir=None).eval_examples()


# --- construction --------------------------------------------------------------------------------
def test_registry_and_make_task():
  task = make_task("humaneval", prompt_style="plain", data_dir=None)
  assert isinstance(task, HumanEvalTask) and TASKS.get("mbpp") is MBPPTask


@pytest.mark.parametrize("kwargs,field", [
    ({"prompt_style": "fancy"}, "task.options.prompt_style"),
    ({"format_weight": 1.0}, "task.options.format_weight"),
    ({"prompt_len": -1}, "task.options.prompt_len"),
    ({"max_workers": 1.5}, "task.options.max_workers"),
    ({"timeout_s": 0}, "task.options.timeout_s"),
    ({"memory_mb": 8}, "task.options.memory_mb")])
def test_bad_options_raise_config_error(kwargs, field):
  with pytest.raises(ConfigError, match=re.escape(field)):
    HumanEvalTask(data_dir=None, **kwargs)


def test_missing_eval_path_is_reported():
  with pytest.raises(FileNotFoundError, match="task.eval_path"):
    HumanEvalTask(eval_path="/nonexistent/HumanEval.jsonl", data_dir=None)


def _trusted_program(code_body: str, example) -> str:
  """Header + code + tests in ONE program: the old layout, used here only to run trusted stubs."""
  return f"{example.meta['code_header']}{code_body}\n\n{example.meta['test']}\n"


def _run_each(programs) -> list[str]:
  """Runs trusted test programs in one sandbox, each in a fresh namespace; returns per program
  "ok" or the name of the exception it raised."""
  driver = ("import contextlib, io, json\nout = []\nfor src in json.loads(SOURCES):\n  try:\n    with contextlib.redirect_stdout(io.StringIO()):\n"
            "      exec(compile(src, 'program', 'exec'), {'__name__': '__main__'})\n"
            "    out.append('ok')\n  except BaseException as e:\n    out.append(type(e).__name__)\n"
            "print(json.dumps(out))\n")
  source = f"SOURCES = {json.dumps(list(programs))!r}\n{driver}"
  result = sandbox.run_program(source, sandbox.SandboxLimits(timeout_s=120))
  assert result.status == "passed", result
  return json.loads(result.stdout)
