"""Tests for the gsm8k and math500 tasks: answer extraction, grading, format rewards, the math-verify
worker, and robustness on random completions.

Oracles: the real benchmark files (gold answers fed back as completions must grade correct),
hand-written completions with known answers, and ``fractions.Fraction`` for numeric equality.
"""
from __future__ import annotations

import json
import re
import threading
import time
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daca_jax.data.local import default_data_dir
from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks import make_task
from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks.base import Example
from daca_jax.tasks.math_answers import (MathVerifier, extract_gsm8k_answer, extract_math_answer,
                                         last_boxed, parse_number)


def _data(rel: str):
  path = default_data_dir() / rel
  if not path.is_file():
    pytest.skip(f"{path} is absent (see ../shared/data/SOURCES.md)")
  return path


@pytest.fixture(scope="module")
def math500():
  _data("math500/test.json")
  task = make_task("math500", data_dir="")
  yield task
  task.verifier.close()


# ---------------------------------------------------------------------------------------------- gsm8k
def test_gsm8k_gold_solutions_grade_correct_on_all_1319():
  path = _data("gsm8k/test.jsonl")
  rows = [json.loads(line) for line in path.read_text().splitlines()]
  plain = make_task("gsm8k", data_dir="", prompt_style="plain")
  examples, source = plain.eval_examples()
  assert len(examples) == len(rows) == 1319 and "test.jsonl" in source
  correct = plain.correct([r["answer"] for r in rows], examples)  # "... #### N": the plain rule
  assert sum(correct) == 1319
  # The same numbers in d1's chat layout (the prompt ends with "<reasoning>"), boxed or written
  # with commas / $ / a trailing period.
  task = make_task("gsm8k", data_dir="")
  examples = task.eval_examples()[0]
  chat = [f"\nwork\n</reasoning>\n<answer>\n${int(ex.meta['gold']):,}.\n</answer>" for ex in examples]
  assert sum(task.correct(chat, examples)) == 1319
  assert task.metrics(chat, examples)["strict_format"] == 1.0
  boxed = [f"\nwork\n</reasoning>\n<answer>\n\\boxed{{{ex.meta['gold_text']}}}\n</answer>" for ex in examples]
  assert sum(task.correct(boxed, examples)) == 1319
  shifted = plain.correct([r["answer"] for r in rows[1:] + rows[:1]], examples)
  assert sum(shifted) < 100  # a grader that accepts anything would fail here
  # Under d1's protocol a completion that states no answer scores nothing, whatever its numbers.
  assert sum(task.correct([r["answer"] for r in rows], examples)) == 0


@pytest.mark.parametrize("completion,style,fallback,expected", [
    ("so 16 - 3 - 4 = 9 and 9 * 2 = 18\n#### 18", "plain", False, Fraction(18)),
    ("#### 1,234,567", "plain", False, Fraction(1234567)),
    ("#### 18 dollars, then 5", "plain", False, Fraction(18)),
    ("The answer is $18.", "chat", True, Fraction(18)),
    ("It costs $18.50 in total.", "chat", True, Fraction(37, 2)),
    ("18.0", "plain", True, Fraction(18)),
    ("the list 1,2,3", "chat", True, Fraction(3)),
    ("The answer is $18.", "chat", False, None),  # no box, no answer span: d1 reads nothing
    ("#### 18", "chat", False, None),  # d1's parser has no #### rule
    ("<answer>\n-7\n</answer>", "chat", False, Fraction(-7)),
    ("<reasoning>\n1 + 1 = 2\n3 apples\n</reasoning>\n<answer>\n42\n</answer>\nthen 99", "chat", False,
     Fraction(42)),
    ("<answer>5</answer> and later <answer>6</answer>", "chat", False, Fraction(6)),
    ("<answer>6</answer><|eot_id|><answer>7</answer>", "chat", False, Fraction(6)),
    ("we get \\boxed{1,000} apples, not 3", "chat", False, Fraction(1000)),
    ("<answer>the total is 12 apples and 30 pears</answer>", "chat", False, Fraction(30)),  # last number
    # d1's parse_gsm_answers: the FIRST box holding a number, anywhere; its first number.
    ("\\boxed{3} apples, then \\boxed{18}", "chat", False, Fraction(3)),
    ("<answer>\\boxed{10 - 2 = 8}</answer>", "chat", False, Fraction(10)),
    ("\\boxed{...} then \\boxed{} then \\boxed{7}", "chat", False, Fraction(7)),
    ("<answer>7</answer> \\boxed{8}", "chat", False, Fraction(8)),  # a box beats the answer span
    ("no number here", "chat", True, None),
    ("####", "plain", False, None),
    ("9" * 5000, "plain", True, None),  # beyond MAX_NUMBER_DIGITS (and Python's int-from-str limit)
])
def test_gsm8k_extraction_hand_cases(completion, style, fallback, expected):
  assert extract_gsm8k_answer(completion, style, fallback) == expected


@pytest.mark.parametrize("completion,expected", [
    # The edge cases LLaDA-8B-Instruct produces.
    ("<answer></answer> then the result is \\boxed{5}", Fraction(5)),
    ("<reasoning>\nr\n</reasoning>\n<answer>\n</answer>\n\\boxed{5}", Fraction(5)),
    ("<answer>\\boxed{}101</answer>", Fraction(101)),
    ("The answer is \\boxed{}101.", Fraction(101)),
    ("so \\boxed{} 42", Fraction(42)),
    ("\\boxed{2:00 pm}", Fraction(2)),  # d1 reads the first number, not the last ("00")
    ("<answer>4</answer><answer></answer>", Fraction(4)),  # an empty last span is skipped
    ("\\boxed{}", None),
])
def test_gsm8k_d1_edge_cases(completion, expected):
  assert extract_gsm8k_answer(completion) == expected


def test_gsm8k_last_number_fallback_is_an_option_off_by_default():
  task = make_task("gsm8k", data_dir=None)
  assert task.last_number_fallback is False and "fallback off" in task.grading_rules()
  on = make_task("gsm8k", data_dir=None, last_number_fallback=True)
  ex = Example(prompt="", target="", meta={"gold": Fraction(18), "gold_text": "18"})
  truncated = "\nFirst 16 - 3 - 4 = 9, then 9 * 2 = 18"  # generation cut before any answer
  assert task.correct([truncated], [ex]) == [False] and on.correct([truncated], [ex]) == [True]
  assert "fallback ON" in on.grading_rules()
  with pytest.raises(ConfigError, match="task.options.last_number_fallback"):
    make_task("gsm8k", data_dir=None, last_number_fallback="yes")


def test_parse_number():
  assert parse_number("1,234.50") == Fraction(2469, 2)
  assert parse_number("$-3") == -3 and parse_number("-3.") == -3
  assert parse_number("1.2.3") is None and parse_number("") is None
  assert parse_number("1 234") == 1234 and parse_number("+18") == 18 and parse_number(".5") == Fraction(1, 2)
  for not_one_number in ("2, 5", "1 2 3", "18,5", "1,23", "1234,567", "12 34"):  # groups of three only
    assert parse_number(not_one_number) is None, not_one_number


@pytest.mark.parametrize("boxed,expected", [
    ("70{,}000", 70000), ("70\\,000", 70000), ("70,\\!000", 70000),  # LaTeX thousands separators
    ("1{,}234{,}567", 1234567),
    ("\u22125", -5), ("-\\$5", -5), ("\\$-5", -5), (".5", Fraction(1, 2)),  # U+2212, an escaped dollar, no 0
    ("2, 5", 2), ("1 2 3", 1), ("18,5", 18),  # not one number: the first number, as d1 reads the box
    ("1,234", 1234), ("1 234", 1234), ("$18", 18), ("18.00", 18),
])
def test_gsm8k_reads_the_number_forms_chat_models_write(boxed, expected):
  """`70{,}000` read as 70: 131 of GSM8K's 1319 test answers are >= 1000, and a gold of 70 credited
  `70{,}000`; `2, 5` read as 25."""
  assert extract_gsm8k_answer(f"<answer>\\boxed{{{boxed}}}</answer>") == expected


def test_format_rewards_match_multiline_reasoning_and_handle_trailing_text():
  good = "<reasoning>\nline one\nline two\n\nline four\n</reasoning>\n<answer>\n18\n</answer>\n"
  assert fmt.strict_format_reward(good) == 0.5 and fmt.soft_format_reward(good) == 0.5
  # d1's strict pattern without re.DOTALL does not match multi-line reasoning; ours must.
  assert not re.match(r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n$", good)
  trailing = good + "and some more text"
  assert fmt.strict_format_reward(trailing) == 0.0 and fmt.soft_format_reward(trailing) == 0.5
  eot = good + "<|eot_id|>junk after the end of text"
  assert fmt.strict_format_reward(eot) == 0.5
  assert fmt.soft_format_reward("<answer>\n18\n</answer>") == 0.0
  assert fmt.strict_format_reward("<reasoning>x</reasoning><answer>18</answer>") == 0.0
  assert fmt.soft_format_reward("<reasoning>x</reasoning><answer>18</answer>") == 0.5


def test_gsm8k_reward_is_correctness_plus_weighted_format_and_accuracy_threshold_holds():
  _data("gsm8k/test.jsonl")
  task = make_task("gsm8k", data_dir="", format_weight=0.1)
  ex = task.eval_examples()[0][:1]
  gold = int(ex[0].meta["gold"])
  assert ex[0].prompt.endswith("<reasoning>")  # d1's prompt opens the reasoning tag
  formatted = f"\nwork\n</reasoning>\n<answer>\n\\boxed{{{gold}}}\n</answer>"
  cases = [formatted, formatted.replace(str(gold), str(gold + 1)), f"#### {gold}", "nothing",
           "<reasoning>" + formatted]  # the tag again: not d1's layout any more (soft only)
  rewards = [float(task.reward([c], ex)[0]) for c in cases]
  assert rewards == pytest.approx([1.1, 0.1, 0.0, 0.0, 1.05])
  plain = make_task("gsm8k", data_dir="", prompt_style="plain")
  assert float(plain.reward([formatted], plain.eval_examples()[0][:1])[0]) == 1.0
  train = plain.train_examples(5, seed=0)
  decoded = plain.decode_completions(plain.encode_targets(train, 2048))
  assert plain.reward(decoded, train).tolist() == [1.0] * 5


def test_missing_data_and_bad_options_are_clear_errors(tmp_path):
  with pytest.raises(DataError, match="gsm8k/test.jsonl"):
    make_task("gsm8k", data_dir=str(tmp_path)).eval_examples()
  with pytest.raises(ConfigError, match="prompt_style"):
    make_task("gsm8k", data_dir=None, prompt_style="markdown")
  with pytest.raises(ConfigError, match="format_weight"):
    make_task("math500", data_dir=None, format_weight=1.5)
  with pytest.raises(ConfigError, match="verify_timeout_s"):
    make_task("math500", data_dir=None, verify_timeout_s=0)


# -------------------------------------------------------------------------------------------- math500
@pytest.mark.parametrize("text,expected", [
    ("so \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
    ("\\boxed{1} then \\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("\\boxed{2} and a truncated \\boxed{\\frac{1", "2"),
    ("\\boxed 5$ done", "5"),
    ("\\fbox{x^2}", "x^2"),
    ("no box", None),
])
def test_last_boxed(text, expected):
  assert last_boxed(text) == expected


def test_math_extraction_prefers_the_answer_tag():
  assert extract_math_answer("\\boxed{1}<answer>\n\\boxed{\\sqrt{2}}\n</answer>") == "\\sqrt{2}"
  assert extract_math_answer("<answer> 7 </answer>") == "7"
  assert extract_math_answer("think \\boxed{3} more") == "3"
  assert extract_math_answer("just 3") is None and extract_math_answer("just 3", "plain") == "just 3"
  assert extract_math_answer("\\boxed{" + "1" * 2000 + "}") is None


def test_math500_gold_answers_verify_against_themselves(math500):
  examples = math500.eval_examples()[0]
  assert len(examples) == 500
  t0 = time.perf_counter()
  ok = math500.correct([f"\\boxed{{{ex.meta['gold']}}}" for ex in examples], examples)
  elapsed = time.perf_counter() - t0
  failures = [ex.meta["gold"] for ex, c in zip(examples, ok) if not c]
  assert sum(ok) >= 495, failures  # measured: 500/500
  # Rotated golds (a different item's answer) must mostly fail.
  rotated = math500.correct([f"\\boxed{{{ex.meta['gold']}}}" for ex in examples[1:] + examples[:1]],
                            examples)
  assert sum(rotated) < 50
  assert elapsed < 120


@pytest.mark.parametrize("gold,answer,expected", [
    ("\\frac{1}{2}", "0.5", True),
    ("\\frac{1}{2}", "\\dfrac12", True),
    ("2", "3", False),
    ("x^2+1", "1+x^2", True),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)", True),
])
def test_math_verify_equivalences(math500, gold, answer, expected):
  assert math500.verifier.equal([(gold, answer)]) == [expected]


def test_math500_reward_from_a_non_main_thread(math500):
  examples = math500.eval_examples()[0][:2]
  good = f"\nr\n</reasoning>\n<answer>\n\\boxed{{{examples[0].meta['gold']}}}\n</answer>"
  out = {}
  thread = threading.Thread(target=lambda: out.update(r=math500.reward([good, "no"], examples)))
  thread.start()
  thread.join(120)
  assert out["r"].tolist() == pytest.approx([1.1, 0.0])


def test_hanging_grade_is_killed_and_the_worker_restarts():
  # A huge integer power runs in native code, where the worker's CPU timer cannot interrupt it: the
  # parent sees the worker's CPU time pass the limit and kills it; the next item gets a fresh one.
  verifier = MathVerifier()
  try:
    assert verifier.equal([("1", "1")]) == [True]  # worker started
    assert verifier.verify([("5", "2^{10^{10}} + 1")]) == [(False, True)]
    assert verifier.num_timeouts == 1
    assert verifier.equal([("\\frac{1}{2}", "0.5")]) == [True]  # a fresh worker
  finally:
    verifier.close()


# --------------------------------------------------------------------------- robustness (property tests)
_ALPHABET = "0123456789,.$-+*/^ \n#{}()\\<>/answerboxd" + "\u0663\u00e9\U0001F600"
_NASTY = st.one_of(
    st.text(max_size=120), st.text(alphabet=_ALPHABET, max_size=400),
    st.integers(0, 3000).map(lambda n: "{" * n + "\\boxed{" + "}" * (n // 3)),
    st.integers(0, 3000).map(lambda n: "(" * n + "1"),
    st.integers(0, 10 ** 400).map(lambda n: f"<answer>{n}</answer>"),
    st.integers(0, 10 ** 200).map(lambda n: f"#### {n:,}.{n}"),
    st.integers(0, 10 ** 200).map(lambda n: f"\\boxed{{{n}^{{{n}}}}}"))


# 100 examples x 100 completions = 10,000 completions per extraction layer (batched: hypothesis's
# per-example overhead would otherwise dominate).
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_NASTY, min_size=100, max_size=100))
def test_extraction_never_raises_on_random_completions(completions):
  for c in completions:
    value = extract_gsm8k_answer(c)
    assert value is None or isinstance(value, Fraction)
    span = extract_math_answer(c, "plain")
    assert span is None or (isinstance(span, str) and len(span) <= 1000)
    assert fmt.strict_format_reward(c) in (0.0, 0.5) and fmt.soft_format_reward(c) in (0.0, 0.5)


# The full math-verify path is slower (a worker round trip plus sympy per item, and up to the 2 s
# math-verify limit for hostile powers), so it gets 5 x 40 = 200 completions, each wrapped in an answer
# tag so that it really reaches math-verify.
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_NASTY, min_size=40, max_size=40))
def test_math500_full_grading_never_raises_on_random_completions(math500, completions):
  completions = [f"<answer>{c}</answer>" for c in completions]
  examples = math500.eval_examples()[0][:1] * len(completions)
  rewards = math500.reward(completions, examples)
  assert rewards.shape == (len(completions),) and ((rewards >= 0) & (rewards < 1.2)).all()
