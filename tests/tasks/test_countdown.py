"""Tests for the Countdown task, its arithmetic parser and solver.

Oracles: Python's own parser (``ast``, walked here with ``fractions.Fraction``; nothing is evaluated
with ``eval``) for expression values; an independent "combine any two numbers" enumeration for the
solver's reachable values; d1's real test file; hand-graded completions.
"""
from __future__ import annotations

import ast
import fractions
import itertools
import json
import random
import subprocess
import sys
import pathlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daca_jax.data.local import default_data_dir
from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks import make_task
from daca_jax.tasks.arith import (MAX_CHARS, MAX_DEPTH, ExpressionError, parse_expression, solve_three,
                                  three_number_expressions)
from daca_jax.tasks.countdown import countdown_reward, generate_items, reachable_targets

REPO = pathlib.Path(__file__).resolve().parents[2]
F = fractions.Fraction


def _d1_file() -> pathlib.Path:
  path = default_data_dir() / "countdown" / "d1_cd3_test.jsonl"
  if not path.is_file():
    pytest.skip(f"d1's Countdown test file {path} is absent (see ../shared/data/SOURCES.md)")
  return path


def _reference_value(text: str) -> F:
  """Value of ``text`` from Python's parser, walked with Fractions (raises ZeroDivisionError)."""
  def walk(node):
    if isinstance(node, ast.Expression):
      return walk(node.body)
    if isinstance(node, ast.Constant) and type(node.value) is int:
      return F(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
      v = walk(node.operand)
      return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
      a, b = walk(node.left), walk(node.right)
      ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
             ast.Div: lambda: a / b}
      return ops[type(node.op)]()
    raise AssertionError(f"unexpected node {ast.dump(node)}")
  return walk(ast.parse(text, mode="eval"))


def _random_expression(rng: random.Random, depth: int) -> str:
  if depth == 0 or rng.random() < 0.3:
    text = str(rng.choice([0, 1, 2, 3, 7, 10, 99, 100, 12345]))
  else:
    op = rng.choice("+-*/")
    text = f"{_random_expression(rng, depth - 1)}{' ' * rng.randint(0, 1)}{op} {_random_expression(rng, depth - 1)}"
  if rng.random() < 0.3:
    text = f"({text})"
  if rng.random() < 0.1:
    text = f"-{text}" if not text.startswith("-") else f"+{text}"
  return text


def test_parser_matches_python_fraction_reference_on_random_expressions():
  rng = random.Random(0)
  checked = zero_div = 0
  for _ in range(3000):
    text = _random_expression(rng, rng.randint(0, 4))
    if len(text) > MAX_CHARS:
      continue
    try:
      expected = _reference_value(text)
    except ZeroDivisionError:
      with pytest.raises(ExpressionError, match="division by zero"):
        parse_expression(text)
      zero_div += 1
      continue
    parsed = parse_expression(text)
    assert parsed.value == expected, text
    literals = [int(n.value) for n in ast.walk(ast.parse(text, mode="eval")) if isinstance(n, ast.Constant)]
    assert sorted(parsed.numbers) == sorted(literals), text
    checked += 1
  assert checked > 2000 and zero_div > 10


@pytest.mark.parametrize("text", [
    "", "   ", "(", ")", "1+", "+", "1 2", "(1+2", "1+2)", "()", "01+2", "1**2", "1//2", "3.0", "2^3",
    "x", "1=1", "\u0663+1", "１+2", "1/0", "5/(3-3)", "1e3"])
def test_malformed_expressions_are_rejected(text):
  with pytest.raises(ExpressionError):
    parse_expression(text)


def test_nesting_and_length_limits():
  assert parse_expression("(" * MAX_DEPTH + "7" + ")" * MAX_DEPTH).value == 7
  with pytest.raises(ExpressionError, match="nesting"):
    parse_expression("(" * (MAX_DEPTH + 1) + "7" + ")" * (MAX_DEPTH + 1))
  with pytest.raises(ExpressionError, match="nesting"):
    parse_expression("-" * (MAX_DEPTH + 1) + "7")
  with pytest.raises(ExpressionError, match="longer"):
    parse_expression("1+" * (MAX_CHARS // 2) + "1")
  with pytest.raises(ExpressionError):  # far deeper than Python's recursion limit: no RecursionError
    parse_expression("(" * 100_000)
  assert parse_expression("0").value == 0 and parse_expression(" 12 - -3 ").value == 15


def _reachable_by_pairing(numbers) -> set[F]:
  """Independent oracle: combine any two of the values with any operator, recursively."""
  if len(numbers) == 1:
    return {numbers[0]}
  out = set()
  for i, j in itertools.permutations(range(len(numbers)), 2):
    rest = [numbers[k] for k in range(len(numbers)) if k not in (i, j)]
    a, b = numbers[i], numbers[j]
    for v in [a + b, a - b, a * b] + ([a / b] if b != 0 else []):
      out |= _reachable_by_pairing(rest + [v])
  return out


def test_solver_enumerates_every_reachable_value_and_writes_each_expression_faithfully():
  rng = random.Random(1)
  for _ in range(60):
    numbers = [rng.choice([0, 1, 2, 3, 5, 7, 10, 25, 50, 100]) for _ in range(3)]
    produced = list(three_number_expressions(numbers))
    assert {v for _, v in produced} == _reachable_by_pairing([F(x) for x in numbers]), numbers
    for expression, value in produced:
      assert _reference_value(expression) == value, expression
      assert sorted(parse_expression(expression).numbers) == sorted(numbers)


def test_solver_solves_every_d1_item_and_the_grader_accepts_the_solution():
  rows = [json.loads(line) for line in _d1_file().read_text().splitlines() if line.strip()]
  assert len(rows) == 256
  for row in rows:
    numbers = [int(x) for x in row["input"].split(",")]
    target = int(row["output"])
    solutions = solve_three(numbers, target)
    assert solutions, row
    assert countdown_reward(solutions[0], numbers, target) == 1.0
    assert countdown_reward(f"<answer>{solutions[-1]}</answer>", numbers, target, "chat") == 1.0
  task = make_task("countdown", data_dir="")
  examples, source = task.eval_examples()
  assert len(examples) == 256 and "d1" in source
  assert task.metrics([ex.target for ex in examples], examples)["accuracy"] == 1.0


NUMS, TARGET = (30, 100, 93), 23  # first d1 item


@pytest.mark.parametrize("completion,style,expected", [
    ("30+93-100", "plain", 1.0),
    ("  (93 - 100) + 30 ", "plain", 1.0),
    ("30-(100-93)", "plain", 1.0),
    ("-100+93+30", "plain", 1.0),             # unary minus, as d1's eval accepts
    ("30+93+100", "plain", 0.1),              # wrong value
    ("30+30-37", "plain", 0.1),               # reuses 30, misses the others
    ("123-100", "plain", 0.1),                # missing number
    ("30+93-100+0", "plain", 0.1),            # extra number, right value
    ("30*93/100*(100-100)+23", "plain", 0.1),
    ("30+93-100=23", "plain", 1.0),           # d1: the left side of "E = N" is the answer
    ("30+93-1OO", "plain", 0.0),
    ("(30+93)/(100-100)", "plain", 0.0),      # division by zero = malformed
    ("", "plain", 0.0),
    ("<answer>30+93-100</answer>", "plain", 1.0),
    ("<reasoning>\nadd, subtract\n</reasoning>\n<answer>\n30 + 93 - 100\n</answer>", "chat", 1.0),
    ("<answer>1+2</answer> oops <answer>30+93-100</answer>trailing", "chat", 1.0),  # last span
    ("<answer>30+93-100</answer> <answer>5</answer>", "chat", 0.1),
    ("30+93-100", "chat", 1.0),               # no box or tag: d1's evaluation grades the whole text
    ("I add 30 and 93, then subtract 100", "chat", 0.0),  # ... which must be an expression
    ("<answer>30+93-100", "chat", 0.0),       # unclosed tag
    ("<answer>30+93-100</answer><|eot_id|><answer>1</answer>", "chat", 1.0),  # after EOT ignored
    ("<answer>30+93-100<|eot_id|></answer>", "chat", 0.0),
    # how chat models write a right answer that d1's parser scores 0: a Unicode minus, LaTeX delimiters and
    # math mode, a name or the target on the left of '='
    ("<answer>\\boxed{93 \u2212 100 + 30}</answer>", "chat", 1.0),
    ("<answer>\\boxed{\\left(93 - 100\\right) + 30}</answer>", "chat", 1.0),
    ("<answer>$93 - 100 + 30$</answer>", "chat", 1.0),
    ("<answer>\\boxed{x = 93 - 100 + 30}</answer>", "chat", 1.0),
    ("<answer>23 = 93 - 100 + 30</answer>", "chat", 1.0),
    ("<answer>x = 93 - 100 + 31</answer>", "chat", 0.1),  # ... and a wrong one stays wrong
    ("<answer>x = y = 23</answer>", "chat", 0.0),
    ("<answer>\\boxed{93 \u2212 100 + 31}</answer>", "chat", 0.1),
])
def test_reward_hand_cases(completion, style, expected):
  assert countdown_reward(completion, NUMS, TARGET, style) == expected


def test_generator_is_seeded_distinct_solvable_and_excludes_eval_items():
  a = generate_items(120, seed=5)
  assert a == generate_items(120, seed=5) and a != generate_items(120, seed=6)
  keys = [(tuple(sorted(n)), t) for n, t in a]
  assert len(set(keys)) == 120
  for numbers, target in a:
    assert all(1 <= x <= 100 for x in numbers) and 1 <= target <= 100
    assert target in reachable_targets(numbers) and solve_three(numbers, target)
  excluded = generate_items(120, seed=5, exclude=frozenset(keys[:60]))
  assert not {(tuple(sorted(n)), t) for n, t in excluded} & set(keys[:60])


@pytest.mark.parametrize("style", ["plain", "chat"])
def test_task_targets_fit_and_grade_correct(style):
  task = make_task("countdown", data_dir=None, eval_size=20, prompt_style=style)
  examples, source = task.eval_examples()
  assert "GENERATED" in source and len(examples) == 20
  train = task.train_examples(50, seed=0)
  assert not {(tuple(sorted(e.meta["numbers"])), e.meta["target"]) for e in train} & {
      (tuple(sorted(e.meta["numbers"])), e.meta["target"]) for e in examples}
  prompts = task.encode_prompts(train)
  targets = task.encode_targets(train, task.min_gen_length)
  assert prompts.shape == (50, task.prompt_len) and targets.shape == (50, task.min_gen_length)
  decoded = task.decode_completions(targets)
  assert task.reward(decoded, train).tolist() == [1.0] * 50
  m = task.metrics(decoded[:10] + ["garbage"] * 10, train[:20])
  assert m == {"accuracy": 0.5, "well_formed": 0.5, "mean_reward": pytest.approx(0.5),
               "grader_bound_hits": 0.0, "num_examples": 20.0}
  if style == "plain":
    assert train[0].prompt == " ".join(map(str, train[0].meta["numbers"])) + f"={train[0].meta['target']}"


def test_bad_prompt_style_is_a_config_error():
  with pytest.raises(ConfigError, match="prompt_style"):
    make_task("countdown", data_dir=None, prompt_style="fancy")


# What LLaDA-8B-Instruct writes under d1's Countdown prompt, and d1's parser's reading.
@pytest.mark.parametrize("completion,expected", [
    ("<answer>\n\\boxed{93 - 100 + 30}\n</answer>", 1.0),
    ("\nreason\n</reasoning>\n<answer>\n\\boxed{30 + 93 - 100}\n</answer>", 1.0),
    ("<answer>\n\\boxed{30 + 93 + 100}\n</answer>", 0.1),
    ("<answer>\\boxed{(100 - 93) \\times 30 \\div 30}</answer>", 0.1),  # operators read; reuses 30
    ("<answer>\\boxed{30 \\times 100 \\div 100 - 7}</answer>", 0.1),
    ("<answer>\\boxed{30 \u00d7 93 \u00f7 93 - 7}</answer>", 0.1),
    ("<answer>\\boxed{30 + 93 - 100 = 23}</answer>", 1.0),   # "E = N": the left side
    ("<answer>\\boxed{30 + 93 - 100 = 24}</answer>", 1.0),   # ... whatever the right side says (d1)
    ("<answer>30 + 93 - 100 = 23</answer>", 1.0),
    ("<answer>Answer: 30 + 93 - 100 = 23</answer>", 1.0),      # the expression run before "="
    ("<answer>23 = 30 + 93 - 100</answer>", 1.0),              # d1 takes "23" (0.1); here the expression
    ("<answer>\\boxed{x = 30 + 93 - 100}</answer>", 1.0),    # d1's rule leaves "" (0.0); here the expression
    ("\\boxed{30 + 93 - 100} and later \\boxed{1 + 2}", 0.1),  # the last box
    ("\\boxed{30 + 93 - 100} then a cut-off \\boxed{1 +", 1.0),  # an unclosed last box is skipped
    ("<answer>\\boxed{}</answer> 30 + 93 - 100", 0.0),       # empty box skipped; the span is "\boxed{}"
])
def test_d1_chat_answers(completion, expected):
  assert countdown_reward(completion, NUMS, TARGET, "chat") == expected


def test_chat_prompt_is_d1s_and_the_sft_target_is_its_answer_format():
  task = make_task("countdown", data_dir=None, eval_size=3, prompt_style="chat")
  ex = task.make_example((30, 100, 93), 23, "30+93-100")
  assert "Using only the provided numbers, create an arithmetic expression" in ex.prompt
  assert ex.prompt.endswith("Numbers: [30, 100, 93]\nTarget: 23<|eot_id|><|start_header_id|>assistant"
                            "<|end_header_id|>\n\n<reasoning>")
  assert ex.target.endswith("</reasoning>\n<answer>\n\\boxed{30+93-100}\n</answer>")
  assert countdown_reward(ex.target, NUMS, TARGET, "chat") == 1.0
  assert "last closed \\boxed{}" in task.grading_rules()


_ALPHABET = "0123456789+-*/() \n=.x<>/answer" + "\u0663\u00e9\U0001F600{}"
# 100 hypothesis examples x 100 completions = 10,000 graded completions (batched: hypothesis's own
# per-example overhead would otherwise dominate the test's time).
_COMPLETIONS = st.lists(st.one_of(
    st.text(max_size=80), st.text(alphabet=_ALPHABET, max_size=300),
    st.integers(0, 400).map(lambda n: "(" * n + "1" + ")" * (n // 2)),
    st.integers(0, 10 ** 300).map(lambda n: f"<answer>{n}*{n}-{n}</answer>"),
    st.integers(0, 10 ** 40).map(lambda n: f"{n}/({n}-{n})")), min_size=100, max_size=100)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(_COMPLETIONS, st.sampled_from(["plain", "chat"]))
def test_reward_never_raises_on_random_completions(completions, style):
  for completion in completions:
    assert countdown_reward(completion, NUMS, TARGET, style) in (0.0, 0.1, 1.0)


@pytest.mark.slow
def test_smoke_config_runs_through_the_main_job(tmp_path):
  cmd = [sys.executable, "experiments/train.py", "--config=configs/countdown_tiny.py:smoke",
         "--progress=false", f"--workdir={tmp_path}"]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  res = json.loads((tmp_path / "results.json").read_text())
  for phase in ("eval_before", "eval_after"):
    assert set(res[phase]) == {"accuracy", "well_formed", "mean_reward", "grader_bound_hits",
                               "num_examples"}
    assert res[phase]["num_examples"] == 32
    assert 0.0 <= res[phase]["accuracy"] <= res[phase]["well_formed"] <= 1.0
  assert res["config"]["task"]["name"] == "countdown"
  if (default_data_dir() / "countdown" / "d1_cd3_test.jsonl").is_file():
    assert "d1 Countdown test set" in res["eval_source"]
  records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in records] == [1, 2, 3]
  assert "accuracy" in proc.stdout and "before RL" in proc.stdout


@pytest.mark.parametrize("row", [{"input": "1,2,3", "output": 6.5}, {"input": "1,2,3", "output": 1e400},
                                 {"input": "1,2,3", "output": True}, {"input": "1,2,3", "output": None}])
def test_an_eval_file_target_that_is_not_an_integer_is_named(tmp_path, row):
  # 6.5 was truncated to 6 (another puzzle, silently); 1e400 (JSON's inf) was an OverflowError traceback.
  path = tmp_path / "cd.jsonl"
  path.write_text(json.dumps({"input": "1,2,3", "output": "6"}) + "\n" + json.dumps(row) + "\n")
  with pytest.raises(DataError, match=r"cd.jsonl: record 1: expected \{'input': 'a,b,c', 'output': target\}"):
    make_task("countdown", eval_path=str(path)).eval_examples()
  path.write_text(json.dumps({"input": "1,2,3", "output": 6}) + "\n")  # a JSON integer is fine
  assert make_task("countdown", eval_path=str(path)).eval_examples()[0][0].meta["target"] == 6
