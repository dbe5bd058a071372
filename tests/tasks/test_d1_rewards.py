"""d1's training rewards (daca_jax.tasks.d1_rewards) and the task.reward registry.

Oracles: values computed by hand from dllm-reasoning/d1 diffu-grpo/reward_func.py @ 837888f on
LLaDA-8B-Instruct-style completions; d1's regular expressions (its patterns, with and without
re.DOTALL) on random and hand-made text; and time bounds on hostile 1 MB inputs.
"""
import random
import re
import time

import numpy as np
import pytest

from daca_jax.config.configure import train_config_from_dict
from daca_jax.errors import ConfigError
from daca_jax.tasks import d1_rewards as d1
from daca_jax.tasks import make_task, text_scan
from daca_jax.tasks.base import Example
from daca_jax.tasks.training_rewards import REWARDS, check_reward, training_rewards

STRICT = r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n$"  # reward_func.py @ 837888f
SOFT = r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>"
CHAT = Example(prompt="<|start_header_id|>assistant<|end_header_id|>\n\n<reasoning>", target="")


# --- GSM8K -----------------------------------------------------------------------------------------

def test_gsm8k_llada_boxed_answer_gets_no_correctness_and_a_length_penalty():
  # LLaDA-8B-Instruct's usual reply to d1's chat prompt (which pre-fills "<reasoning>"): multi-line
  # reasoning, a boxed answer, EOS right after </answer>.
  completion = "\nJanet has 16 eggs.\nShe sells 16 - 7 = 9.\n</reasoning>\n<answer>\n\\boxed{18}\n</answer>"
  text = "<reasoning>" + completion
  # xml: 3 tag lines (0.375), minus 0.001 x len(text) (no "\n</answer>\n" to split at), then
  # "\n</answer>" at the very end: +0.125 + 0.001; soft/strict 0 (newlines), int 0, correct 0.
  expected = 0.125 * 4 + 0.001 - 0.001 * len(text)
  reward, correct = d1.D1_REWARDS["gsm8k"](completion, _gsm8k_example("18"))
  assert not correct and reward == pytest.approx(expected)
  assert d1.xml_count(text + "\n") == 0.5  # with a final newline, no length penalty at all
  # d1's later DOTALL patterns: the soft format now matches (+0.5), strict still needs a final newline.
  reward2, _ = d1.D1_DOTALL_REWARDS["gsm8k"](completion, _gsm8k_example("18"))
  assert reward2 == pytest.approx(expected + 0.5)


def _gsm8k_example(gold, prompt=CHAT.prompt):
  return Example(prompt=prompt, target="", meta={"gold_text": gold})


def test_gsm8k_d1_layout_scores_3_5_because_soft_format_never_matches_it():
  text = "<reasoning>\n9 * 2 = 18.\n</reasoning>\n<answer>\n18\n</answer>\n"
  # xml 0.5 exactly, strict 0.5, int 0.5, correct 2.0; soft 0: "." cannot cross the newline after
  # <reasoning>, so the layout d1's own prompt asks for never matches its soft pattern.
  assert d1.xml_count(text) == 0.5 and d1.soft_format(text) == 0.0 and d1.strict_format(text) == 0.5
  reward, correct = d1.gsm8k_reward(text, "18")
  assert correct and reward == pytest.approx(3.5)
  assert d1.gsm8k_reward(text, "18", dotall=True)[0] == pytest.approx(4.0)


def test_gsm8k_text_after_the_answer_and_bare_answers():
  text = "<reasoning>\nx\n</reasoning>\n<answer>\n18\n</answer>\nThe answer is 18."
  # xml: 0.25 + (0.125 - 0.017) + (0.125 - 0.017); strict 0; int 0.5; correct 2.0
  assert d1.gsm8k_reward(text, "18") == (pytest.approx(0.25 + 0.108 + 0.108 + 0.5 + 2.0), True)
  assert d1.gsm8k_reward("The answer is 18", "18") == (0.0, False)
  assert d1.gsm8k_reward("18", "18") == (2.5, True)  # no tags at all: correct + int
  assert d1.gsm8k_reward("<answer>1,080</answer>", "1,080")[0] == 2.0  # correct, but not isdigit
  assert d1.gsm8k_reward("<answer>$18</answer>", "18") == (0.0, False)
  # only the text after the LAST <answer> is read
  assert d1.extract_xml_answer("<answer>18</answer> <answer>19") == "19"


def test_prompt_prefill_is_graded_as_part_of_the_completion():
  completion = "\n9 * 2 = 18.\n</reasoning>\n<answer>\n18\n</answer>\n"
  assert d1.D1_REWARDS["gsm8k"](completion, _gsm8k_example("18"))[0] == pytest.approx(3.5)
  plain = _gsm8k_example("18", prompt="Question?\n")  # no prefill: the completion alone
  # xml 0.375 (no "<reasoning>\n"), strict 0 (the text starts with a newline), int 0.5, correct 2.0
  assert d1.D1_REWARDS["gsm8k"](completion, plain)[0] == pytest.approx(2.875)


# --- MATH --------------------------------------------------------------------------------------------

def _math(completion, gold):
  return d1.D1_REWARDS["math500"](completion, Example(prompt=CHAT.prompt, target="", meta={"gold": gold}))


def test_math_boxed_answer_and_the_format_term():
  completion = "\nWe add 1/2 and 1/4.\n</reasoning>\n<answer>\n\\boxed{\\frac{3}{4}}\n</answer>"
  assert _math(completion, "\\frac{3}{4}") == (2.75, True)  # 2.0 + 0.5 x (1 + 0.5)
  assert d1.math_reward("So it is \\boxed{5}.", "5") == (2.25, True)  # no answer tag: format 0.25
  # no box: the whole completion is compared (wrong), the format term only sees the tag
  assert d1.math_reward("<answer>5</answer>", "5") == (0.75, False)
  # d1 writes "\boxed" without a raw string: its test looks for a backspace followed by "oxed"
  assert d1.boxed_format("<answer>\x08oxed</answer>") == 1.0
  assert d1.boxed_format("<answer>\\boxed{5}</answer><answer>x") == 0.75


def test_math_normaliser_decisions():
  for answer in ("0.5", "1/2", "\\frac12", "\\dfrac{1}{2}", "\\left\\frac{1}{2}\\right"):
    assert d1.math_equiv(answer, "\\frac{1}{2}"), answer
  assert not d1.math_equiv("2.0", "2")
  assert d1.math_equiv("x = 3", "3") and d1.math_equiv("90^\\circ", "90") and d1.math_equiv("5\\%", "5")
  # where d1's normaliser raises, the raw strings are compared
  assert d1.math_equiv("x/y", "x/y") and not d1.math_equiv(" x/y", "x/y")
  assert d1.math_equiv("\\sqrt", "\\sqrt") and not d1.math_equiv("2\\sqrt", "2 \\sqrt")
  assert d1.math_equiv(None, None) and not d1.math_equiv("1", None)


def test_math_last_box_rules():
  assert d1.last_boxed_only("a \\boxed 7$ then \\boxed{5}") == "\\boxed 7"  # the space form wins
  assert d1.last_boxed_only("\\boxed{1} and \\boxed{\\frac{2}{3}} end") == "\\boxed{\\frac{2}{3}}"
  assert d1.last_boxed_only("\\boxed{2") is None and d1.last_boxed_only("no box") == "no box"
  assert d1.remove_boxed("\\fbox{3}") == "\\fbox{3}"  # never unwrapped
  assert d1.math_reward("\\boxed{\\frac{2}{3}", "\\frac{2}{3}")[1] is False  # unclosed: whole text


# --- Countdown and Sudoku ------------------------------------------------------------------------------

def _countdown(completion, numbers=(44, 19, 35), target=98):
  ex = Example(prompt=CHAT.prompt, target="", meta={"numbers": numbers, "target": target})
  return d1.D1_REWARDS["countdown"](completion, ex)


def test_countdown_scores():
  head = "\nAdd them all.\n</reasoning>\n"
  assert _countdown(head + "<answer>\n44 + 19 + 35\n</answer>") == (1.0, True)
  # LLaDA's usual boxed answer is never unwrapped: the format score only
  assert _countdown(head + "<answer>\n\\boxed{44 + 19 + 35}\n</answer>") == (0.1, False)
  assert _countdown(head + "<answer>44 + 19 - 35</answer>") == (0.1, False)  # wrong value
  assert _countdown(head + "<answer></answer>") == (0.1, False)  # any span earns the format score
  assert _countdown(head + "44 + 19 + 35") == (0.0, False)  # no span
  assert _countdown("<answer>44+19+35</answer> then <answer>oops</answer>") == (0.1, False)  # last span
  assert _countdown("<answer>(44 + 19 + 35)</answer>", numbers=(35, 44, 19)) == (1.0, True)
  # Python-only syntax that d1's eval accepts is malformed for the bounded parser (documented)
  assert _countdown("<answer>2**3*1</answer>", numbers=(2, 3, 1), target=8) == (0.1, False)
  assert _countdown("<answer>5/(3-3)</answer>", numbers=(3, 3, 5), target=1) == (0.1, False)


_SOLUTION = "1234341221434321"
_BLANKS = (0, 2, 5, 7, 8, 10, 13, 15)
_PUZZLE = "".join("0" if i in _BLANKS else c for i, c in enumerate(_SOLUTION))


@pytest.mark.parametrize("answer,expected", [
    ("\n1234341221434321\n", 1.0),
    ("1234 3412 2143 4320", 7 / 8),  # separators dropped; the last cell wrong
    ("1234", 2 / 8),  # padded with "0": only cells 0 and 2 right
    ("\u00b2234341221434321", 7 / 8),  # a superscript is a digit to str.isdigit, never a right cell
])
def test_sudoku_cell_fraction(answer, expected):
  ex = Example(prompt=CHAT.prompt, target="", meta={"puzzle": _PUZZLE, "solution": _SOLUTION})
  reward, correct = d1.D1_REWARDS["sudoku4x4"](f"\nsolve\n</reasoning>\n<answer>{answer}</answer>", ex)
  assert reward == pytest.approx(expected) and correct == (expected == 1.0)
  assert d1.D1_REWARDS["sudoku4x4"]("no answer tags", ex) == (0.0, False)
  assert d1.sudoku_reward("<answer>1234</answer>", _SOLUTION, _SOLUTION) == (0.0, False)  # no blanks


# --- the patterns, against d1's regular expressions ------------------------------------------------------

_ATOMS = ["<reasoning>", "</reasoning>", "<answer>", "</answer>", "\n", " ", "\t", "\x0b", "x", "12", "\u00a0"]


def _random_texts(n, seed=0):
  rng = random.Random(seed)
  pick = lambda k: "".join(rng.choice(_ATOMS) for _ in range(rng.randint(0, k)))
  for _ in range(n):
    u = rng.random()
    if u < 0.2:  # near-misses of the soft layout
      yield "<reasoning>" + pick(3) + "</reasoning>" + pick(2) + "<answer>" + pick(3) + "</answer>" + pick(3)
    elif u < 0.5:  # near-misses of the strict layout
      yield ("<reasoning>\n" + "".join(rng.choice(_ATOMS) for _ in range(rng.randint(0, 6))) + "\n</reasoning>"
             "\n<answer>\n" + "".join(rng.choice(_ATOMS) for _ in range(rng.randint(0, 3))) + "\n</answer>"
             + rng.choice(["", "\n", "\n\n", "\n\n\n", "x", "\nx"]))
    else:
      yield "".join(rng.choice(_ATOMS) for _ in range(rng.randint(0, 30)))


def test_format_scans_decide_as_d1s_regexes_on_random_text():
  hits = {"strict": 0, "soft": 0, "strict_dotall": 0, "soft_dotall": 0}
  for text in _random_texts(4000):
    for name, pattern, flags, dotall in (("strict", STRICT, 0, False), ("soft", SOFT, 0, False),
                                         ("strict_dotall", STRICT, re.DOTALL, True),
                                         ("soft_dotall", SOFT, re.DOTALL, True)):
      fn = d1.strict_format if name.startswith("strict") else d1.soft_format
      want = 0.5 if re.match(pattern, text, flags) else 0.0
      assert fn(text, dotall) == want, (name, text)
      hits[name] += want > 0
    spans = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)
    assert d1.last_answer_span(text) == (spans[-1].strip() if spans else None)
    assert d1.extract_xml_answer(text) == text.split("<answer>")[-1].split("</answer>")[0].strip()
  assert min(hits.values()) > 20, hits  # the random texts reach both outcomes of every pattern


def test_soft_format_hand_made_cases():
  assert d1.soft_format("<reasoning>a</reasoning> \n <answer>b</answer> tail") == 0.5
  assert d1.soft_format("<reasoning>a</reasoning><answer>b\n</answer>") == 0.0  # answer spans a line
  assert d1.soft_format("<reasoning>a</reasoning><answer>b\n</answer>", dotall=True) == 0.5
  # a later candidate on a later line can still match
  text = "<reasoning>a</reasoning><answer>b\n</reasoning></reasoning>\n<answer>c</answer>"
  assert d1.soft_format(text) == (0.5 if re.match(SOFT, text) else 0.0)
  text = "<reasoning>a</reasoning> <answer>b</reasoning>\n<answer>c</answer>"
  assert d1.soft_format(text) == (0.5 if re.match(SOFT, text) else 0.0) == 0.5


def test_xml_count_split_is_left_to_right_and_non_overlapping():
  # "\n</answer>\n</answer>\n": split finds the separator at 0 only, so nothing follows it but
  # "</answer>\n" (10 characters); an rfind would find a second, overlapping one.
  text = "<reasoning>\n\n</reasoning>\n<answer>\n</answer>\n</answer>\n"
  assert text.count("\n</answer>\n") == 1
  assert d1.xml_count(text) == pytest.approx(0.375 - 0.010)


# --- hostile text ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "<reasoning>" + "</reasoning><answer>" * 50_000,  # d1's soft regex: minutes
    "<reasoning>" + "</reasoning> <answer>" * 50_000 + "\n</answer>",
    "<answer>" * 125_000,  # d1's findall: minutes
    "\\boxed{" * 140_000,
    "\\frac1" * 160_000 + "/",
    "<reasoning>\n" * 80_000,
])
def test_every_reward_is_linear_on_1mb_of_hostile_text(text):
  assert len(text) >= 900_000
  start = time.process_time()
  d1.gsm8k_reward(text, "18")
  d1.gsm8k_reward(text, "18", dotall=True)
  d1.math_reward(text, "\\frac{1}{2}")
  d1.countdown_reward(text, (1, 2, 3), 6)
  d1.sudoku_reward(text, _PUZZLE, _SOLUTION)
  assert time.process_time() - start < 2.0


# --- the registry and the trainer's hook -----------------------------------------------------------------

def test_registry_refuses_tasks_d1_has_no_reward_for():
  check_reward("", "humaneval")
  check_reward("d1", "gsm8k")
  with pytest.raises(ConfigError, match=r"task\.reward='d1'.*'humaneval'.*\['countdown', 'gsm8k', 'math500', 'sudoku4x4'\]"):
    check_reward("d1", "humaneval")
  with pytest.raises(ConfigError, match=r"task\.reward='d2'.*\['d1', 'd1_dotall'\]"):
    check_reward("d2", "gsm8k")
  assert REWARDS.names() == ["d1", "d1_dotall"]
  from configs import countdown_tiny
  c = countdown_tiny.get_config("smoke")
  c.task.reward = "d1"
  assert train_config_from_dict(c).task.reward == "d1"
  c.task.name = "json_schema"
  with pytest.raises(ConfigError, match=r"task\.reward='d1'.*json_schema"):
    train_config_from_dict(c)


def test_training_rewards_of_a_chat_task_and_the_task_own_reward():
  task = make_task("countdown", data_dir=None, prompt_style="chat")
  examples = task.train_examples(2, 0)
  right = [f"\nIt works.\n</reasoning>\n<answer>\n{ex.target.split('boxed{')[1].split('}')[0]}\n</answer>"
           for ex in examples]
  boxed = [ex.target for ex in examples]  # the library's SFT layout: \boxed{} inside the answer
  got = training_rewards("d1", task, right + boxed, examples + examples)
  np.testing.assert_array_equal(got.reward, np.float32([1.0, 1.0, 0.1, 0.1]))
  np.testing.assert_array_equal(got.correct, [True, True, False, False])
  own = training_rewards("", task, right + boxed, examples + examples)  # the library's grader unboxes
  np.testing.assert_array_equal(own.reward, np.float32([1.0] * 4))
  np.testing.assert_array_equal(own.correct, [True] * 4)
  hits = task.num_bound_hits
  long = training_rewards("d1", task, ["x" * (text_scan.MAX_COMPLETION_CHARS + 1)], examples[:1])
  assert long.reward[0] == 0.0 and not long.correct[0] and task.num_bound_hits == hits + 1
  with pytest.raises(ValueError, match="2 completions for 1 examples"):
    training_rewards("d1", task, right, examples[:1])
