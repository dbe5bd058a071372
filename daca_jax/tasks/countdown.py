"""Countdown with three numbers (``countdown``): generator, exhaustive solver, grader and data.

An item is three numbers and a target; the answer is an arithmetic expression with ``+ - * /`` and
parentheses that uses each number exactly once and equals the target (d1's ``countdown_cd3`` task;
its 256 test items use numbers and targets in 1..100, all solvable).

Prompt styles (``prompt_style``): ``"plain"`` (tiny byte model): prompt ``"30 100 93=23"``,
completion = the bare expression; ``"chat"``: d1's Countdown evaluation prompt (:data:`SYSTEM_PROMPT`
and ``"Numbers: [30, 100, 93]\\nTarget: 23"``, d1 ``eval/countdown.py``): reasoning, then the
expression as ``\\boxed{...}`` inside ``<answer>`` tags; ``"d1_train"``: d1's Countdown training prompt
(:func:`daca_jax.tasks.d1_train_prompts.countdown_message`, nothing pre-filled): the bare expression
inside ``<answer>`` tags.

Answer extraction (:func:`extract_expression`, both styles), d1's evaluation parser
(``eval/parse_and_get_acc.py``, ``parse_countdown_answers``), rule by rule:

1. the content of the last closed, non-empty ``\\boxed{...}``; else the last complete, non-empty
   ``<answer>...</answer>`` span; else the whole completion (cut at the first end-of-text marker);
2. ``\\times``, ``\\cdot`` and ``×`` are read as ``*``, ``\\div`` and ``÷`` as ``/``, the minus sign U+2212 as
   ``-``; ``\\left``, ``\\right`` and ``$`` are dropped (``$\\left(93 - 100\\right) + 30$``);
3. ``x = E`` (a name, then one ``=``) and ``23 = E`` (a number first) grade ``E``;
4. any other equation ``E = N`` is decided as d1 does: the left side is the answer. Precisely, the first
   maximal run of characters ``0-9 + - * / ( )`` and spaces that is followed by ``=`` and then a
   digit, ``.`` or space is taken (so ``92 / 2 = 46`` and ``Answer: 92 / 2 = 46`` grade ``92 / 2``;
   whatever the right side says is ignored). Any other text with ``=`` is malformed.

Reward (d1's values: 1.0 / 0.1 / 0), graded with the project's own parser
(:func:`daca_jax.tasks.arith.parse_expression`; nothing is ``eval``-ed):

* 1.0: the answer is a well-formed expression whose integer literals are exactly the item's numbers
  (as a multiset) and whose exact value equals the target;
* 0.1: a well-formed expression that is wrong (other value, or numbers missing, reused or extra);
* 0.0: no answer, or an answer that is not a well-formed expression (including division by zero,
  more than 256 characters, or nesting deeper than 32), or a completion longer than
  :data:`daca_jax.tasks.text_scan.MAX_COMPLETION_CHARS` (a grader bound hit, counted in the metric
  ``grader_bound_hits``).

Where this differs from d1 (evaluation parser and ``diffu-grpo/reward_func.py``'s ``compute_score``),
knowingly:

* d1's training reward gives 0.1 to ANY text inside ``<answer>`` tags (unparsable text and division
  by zero included); here malformed answers get 0, so the format bonus rewards well-formed
  expressions only. d1's training reward also reads only the last answer span and never unwraps
  ``\\boxed{}``, so it gives 0.0/0.1 to LLaDA-8B-Instruct's usual ``<answer>\\boxed{92 / 2}</answer>``;
  one grader serves both training and evaluation here, with the evaluation parser's rules.
* d1 ``eval``s the answer, so Python syntax such as ``2**3``, ``7//2`` or ``3.0`` could score 1.0;
  here those are malformed. Unary ``+``/``-`` are accepted, as in d1.
* d1 compares ``abs(value - target) < 1e-5``; here the comparison is exact. For numbers <= 100 the
  two agree: a non-integer value of three such numbers has a denominator <= 10^4, so it is >= 1e-4
  away from any integer.
* the last box is the last CLOSED one (d1: the last ``\\boxed``, and when it is unclosed the answer
  span); empty boxes are skipped; the answer span is the last non-empty one (d1's evaluation parser
  reads the first span, its training reward the last; they agree when there is one); ``×``/``÷``
  are read as operators (d1 reads only the LaTeX forms), and so is U+2212; ``\\left``/``\\right`` and ``$``
  are dropped and ``x = E`` / ``23 = E`` grade ``E`` (d1 scores these right answers 0: its equation rule
  reads the empty left side, or the target as the answer).
* text after the first end-of-text marker is ignored.

Why one module (about 350 lines, at the bound): its generator, solver and grader are small and serve only this
task.
"""
from __future__ import annotations

import os
import pathlib
import re
from typing import Any, Collection, Sequence

import numpy as np

from daca_jax.data import local, sources
from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks import d1_train_prompts
from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks import text_scan
from daca_jax.tasks.arith import ExpressionError, parse_expression, solve_three, three_number_expressions
from daca_jax.tasks.base import DATA_OPTIONS, check_eval_path, TASKS, Example, Task
from daca_jax.tasks.tokenizer import Tokenizer

D1_TEST_FILE = "countdown/d1_cd3_test.jsonl"  # relative to the data dir (../shared/data/SOURCES.md)
MIN_NUMBER, MAX_NUMBER = 1, 100  # range of d1's numbers and targets
CORRECT_REWARD, FORMAT_REWARD = 1.0, 0.1  # d1's score / format_score


# d1's Countdown evaluation system prompt (dllm-reasoning/d1 eval/countdown.py, CTD_SYSTEM_PROMPT),
# verbatim (the missing space before "Respond" included).
SYSTEM_PROMPT = (
    "Using only the provided numbers, create an arithmetic expression that evaluates to exactly the "
    "provided target number. You may use the operations +, -, *, and / as needed, but each number "
    "must be used exactly once. Think step-by-step. After reasoning, provide only your final "
    "expression inside \\boxed{} tags without including an equals sign or the target number. For "
    "example: \\boxed{a + b * c}Respond in the following format:\n<reasoning>\nYour reasoning "
    "here\n</reasoning>\n<answer>\n\\boxed{...}\n</answer>")

_OPERATOR_SPELLINGS = (("\\div", "/"), ("\\times", "*"), ("\\cdot", "*"), ("\u00d7", "*"),
                       ("\u00f7", "/"), ("\u2212", "-"), ("\\left", ""), ("\\right", ""), ("$", ""))
# ``x = E`` (a name for the answer) and ``23 = E`` (the target first): the right side is the answer.
_NAMED = re.compile(r"\s*(?:[A-Za-z]\w{0,15}|\d{1,4})\s*=([^=]*)")
_EQUATION_LEFT = frozenset("0123456789+-*/() ")  # d1's [0-9+\-*/() ] before "="
_EQUATION_RIGHT = frozenset("0123456789. ")  # d1's [0-9. ] right after "="


def _left_of_equation(text: str) -> str | None:
  """d1's ``re.search(r"([0-9+\\-*/() ]+)=[0-9. ]+", text).group(1)``, stripped, in linear time.

  The leftmost match is the maximal run of left-side characters that ends at the first ``=``
  followed by a right-side character (runs end at distinct ``=`` signs and never contain one).
  """
  pos = text.find("=")
  while pos >= 0:
    if pos + 1 < len(text) and text[pos + 1] in _EQUATION_RIGHT:
      start = pos
      while start > 0 and text[start - 1] in _EQUATION_LEFT:
        start -= 1
      if start < pos:
        return text[start:pos].strip()
    pos = text.find("=", pos + 1)
  return None


def extract_expression(completion: str, prompt_style: str = "chat") -> str | None:
  """The answer text graded for ``completion`` (rules 1-3 of the module docstring); None for a
  completion longer than ``text_scan.MAX_COMPLETION_CHARS``.

  Every prompt style uses the same rules; ``prompt_style`` is checked only.
  """
  fmt.check_prompt_style(prompt_style, fmt.REASONING_PROMPT_STYLES)
  if text_scan.over_limit(completion):
    return None
  text = fmt.clean_completion(completion)
  answer = fmt.last_box_or_answer(text)
  if answer is None:
    answer = text
  for spelling, operator in _OPERATOR_SPELLINGS:
    answer = answer.replace(spelling, operator)
  named = _NAMED.fullmatch(answer)
  if named is not None and named.group(1).strip():
    return named.group(1).strip()
  left = _left_of_equation(answer)
  return (left if left is not None else answer).strip()


def grade_expression(answer: str | None, numbers: Sequence[int], target: int) -> float:
  """Reward of an extracted answer (see module docstring): 1.0, 0.1 or 0.0."""
  if not answer:
    return 0.0
  try:
    parsed = parse_expression(answer)
  except ExpressionError:
    return 0.0
  if sorted(parsed.numbers) == sorted(numbers) and parsed.value == target:
    return CORRECT_REWARD
  return FORMAT_REWARD


def countdown_reward(completion: str, numbers: Sequence[int], target: int,
                     prompt_style: str = "plain") -> float:
  """d1-valued Countdown reward of a decoded completion (1.0 / 0.1 / 0.0; see module docstring)."""
  return grade_expression(extract_expression(completion, prompt_style), numbers, target)


def reachable_targets(numbers: Sequence[int], lo: int = MIN_NUMBER, hi: int = MAX_NUMBER) -> list[int]:
  """Sorted integer targets in ``[lo, hi]`` that some expression of the three numbers equals."""
  values = {v for _, v in three_number_expressions(numbers)}
  return sorted(int(v) for v in values if v.denominator == 1 and lo <= v <= hi)


def generate_items(num: int, seed: int, exclude: Collection[tuple[tuple[int, ...], int]] = frozenset(),
                   max_consecutive_failures: int = 10_000) -> list[tuple[tuple[int, int, int], int]]:
  """Generates distinct solvable Countdown items.

  Each attempt draws (``np.random.default_rng(seed)``) three numbers uniformly from 1..100 and a
  target uniformly among the distinct integers in 1..100 that the numbers can reach (see
  :func:`reachable_targets`); a draw with no reachable target, a repeat, or an item in ``exclude``
  (compared with the numbers sorted) is retried.

  Args:
    num: number of items, >= 0.
    seed: seed of the numpy Generator.
    exclude: ``(sorted numbers, target)`` pairs that must not be generated (the evaluation set).
    max_consecutive_failures: give up after this many fruitless attempts in a row.

  Returns:
    ``[((a, b, c), target)]`` of length ``num``.

  Raises:
    ValueError: ``num`` is negative.
    DataError: not enough distinct items could be found.
  """
  if num < 0:
    raise ValueError(f"generate_items: num must be >= 0, got {num}")
  exclude = frozenset(exclude)
  rng = np.random.default_rng(seed)
  seen: set[tuple[tuple[int, ...], int]] = set()
  out: list[tuple[tuple[int, int, int], int]] = []
  failures = 0
  while len(out) < num:
    numbers = tuple(int(x) for x in rng.integers(MIN_NUMBER, MAX_NUMBER + 1, size=3))
    targets = reachable_targets(numbers)
    key = None
    if targets:
      target = targets[int(rng.integers(len(targets)))]
      key = (tuple(sorted(numbers)), target)
    if key is None or key in seen or key in exclude:
      failures += 1
      if failures >= max_consecutive_failures:
        raise DataError(f"could only generate {len(out)} of {num} distinct Countdown items "
                        f"({len(exclude)} excluded); ask for fewer examples")
      continue
    failures = 0
    seen.add(key)
    out.append((numbers, target))
  return out


def _integer(value: Any) -> int:
  """``value`` as an int: a JSON integer or a string of one (d1 writes ``"23"``). A float (``6.5``,
  ``1e400`` = inf) or a bool is refused with ValueError, never truncated."""
  if isinstance(value, int) and not isinstance(value, bool):
    return value
  if isinstance(value, str):
    return int(value)
  raise ValueError(f"not an integer: {value!r}")


def _parse_row(row: dict, where: str) -> tuple[tuple[int, int, int], int]:
  try:
    numbers = tuple(_integer(x) for x in str(row["input"]).split(","))
    target = _integer(row["output"])
  except (KeyError, ValueError):
    raise DataError(f"{where}: expected {{'input': 'a,b,c', 'output': target}}, got {row!r}") from None
  if len(numbers) != 3:
    raise DataError(f"{where}: expected three numbers, got {row['input']!r}")
  if not solve_three(numbers, target):
    raise DataError(f"{where}: {numbers} cannot reach {target} using each number once")
  return numbers, target  # type: ignore[return-value]


@TASKS.register("countdown")
class CountdownTask(Task):
  """Countdown with three numbers.

  Args:
    data_dir: data directory (``data.data_dir``; ``None`` = no local data, ``""`` = the default if it
      exists), or a source of the benchmark files (:mod:`daca_jax.data.sources`). The d1 test set is read
      from ``<data_dir>/countdown/d1_cd3_test.jsonl`` when present.
    eval_path: explicit evaluation file in d1's JSONL layout; overrides ``data_dir``.
    eval_size: size of the generated fallback evaluation set.
    seed: seed of the generated fallback evaluation set.
    prompt_style: ``"plain"``, ``"chat"`` or ``"d1_train"`` (see module docstring).
    tokenizer: the model's tokenizer (None: the byte tokenizer).

  Raises:
    ConfigError: bad ``eval_size`` or ``prompt_style``, or the chat style with a tokenizer that has no
      chat template.
    FileNotFoundError: ``eval_path`` or ``data_dir`` is given but does not exist.
  """

  name = "countdown"
  prompt_styles = fmt.REASONING_PROMPT_STYLES
  OPTIONS = {**DATA_OPTIONS, "eval_size": 256, "seed": 1234, "prompt_style": "plain"}

  def __init__(self, data_dir: str | os.PathLike[str] | None = None, eval_path: str = "",
               eval_size: int = 256, seed: int = 1234, prompt_style: str = "plain",
               tokenizer: Tokenizer | None = None):
    self.prompt_style = fmt.check_prompt_style(prompt_style, self.prompt_styles)
    self._set_tokenizer(tokenizer)
    if isinstance(eval_size, bool) or not isinstance(eval_size, (int, np.integer)) or eval_size < 1:
      raise ConfigError("task.eval_size", eval_size, "a positive int")
    self.eval_size, self.seed = int(eval_size), int(seed)
    self.eval_path = check_eval_path(eval_path)
    self.benchmarks = sources.open_benchmarks(data_dir)
    # Longest prompt: the numbers are separate words, so the prompt with every number n has the most
    # tokens for some n in 1..100 (bytes: n = 100). Longest answer: "(100-100)/100" (13 characters).
    self.prompt_len = max(len(self.prompt_ids(self._prompt((n, n, n), n))) for n in range(1, 101))
    widest = self.make_example((100, 100, 100), 100, "(100-100)/100")
    self.min_gen_length = len(self.tokenizer.encode(widest.target)) + 1
    self._eval: tuple[list[Example], str] | None = None
    self.num_bound_hits = 0

  def make_example(self, numbers: Sequence[int], target: int, solution: str | None = None) -> Example:
    """Formats one item; ``solution`` (default: the solver's first expression) is the SFT target."""
    if solution is None:
      solutions = solve_three(numbers, target)
      if not solutions:
        raise ValueError(f"{tuple(numbers)} cannot reach {target}")
      solution = solutions[0]
    meta = {"numbers": tuple(int(x) for x in numbers), "target": int(target)}
    if self.prompt_style == "plain":
      return Example(prompt=self._prompt(numbers, target), target=solution, meta=meta)
    value = parse_expression(solution).value
    reasoning = f"Try {solution}: it uses {', '.join(map(str, numbers))} once each and equals {value}."
    answer = solution if self.prompt_style == fmt.D1_TRAIN else f"\\boxed{{{solution}}}"
    return Example(prompt=self._prompt(numbers, target),
                   target=fmt.reasoning_answer_target(self.prompt_style, reasoning, answer), meta=meta)

  def _prompt(self, numbers: Sequence[int], target: int) -> str:
    if self.prompt_style == "plain":
      return f"{' '.join(map(str, numbers))}={target}"
    if self.prompt_style == fmt.D1_TRAIN:
      return self.chat_template.user_turn(d1_train_prompts.countdown_message(numbers, target))
    question = f"Numbers: {[int(x) for x in numbers]}\nTarget: {int(target)}"  # d1's layout
    return fmt.d1_chat_prompt(self.chat_template, SYSTEM_PROMPT, question)

  def eval_examples(self) -> tuple[list[Example], str]:
    """Returns ``(examples, source)``: ``eval_path``, else d1's test file, else a GENERATED set."""
    if self._eval is None:
      data = self.benchmarks
      if self.eval_path:
        path = pathlib.Path(self.eval_path).expanduser()
        found, read = path.is_file(), lambda: local.read_json_records(path)
      else:
        path = None if data is None else data.where(D1_TEST_FILE)
        found = data is not None and data.has(D1_TEST_FILE)
        read = lambda: data.json_records(D1_TEST_FILE)
      if found:
        rows = [_parse_row(r, f"{path}: record {i}") for i, r in enumerate(read())]
        if not rows:
          raise DataError(f"{path}: no items")
        source = (f"{path} (task.eval_path)" if self.eval_path else
                  f"d1 Countdown test set {path} (dllm-reasoning/d1 dataset/countdown_cd3_test.jsonl)")
        source += f", {len(rows)} items"
      else:
        rows = generate_items(self.eval_size, self.seed)
        source = (f"GENERATED held-out set of {len(rows)} items (seed={self.seed}): d1's test file "
                  f"{D1_TEST_FILE} was not found ({path if path else 'no data dir'})")
      self._eval = ([self.make_example(n, t) for n, t in rows], source)
    return list(self._eval[0]), self._eval[1]

  def item_key(self, example: Example) -> str:
    """The numbers as a multiset and the target (the generator's notion of one item: a reordering of the
    numbers is the same item)."""
    return f"{sorted(example.meta['numbers'])}={example.meta['target']}"

  def train_examples(self, num: int, seed: int) -> list[Example]:
    """Generates ``num`` distinct items (none in the evaluation set) with solver SFT targets."""
    exclude = frozenset((tuple(sorted(ex.meta["numbers"])), ex.meta["target"])
                        for ex in self.eval_examples()[0])
    return [self.make_example(n, t) for n, t in generate_items(num, seed, exclude=exclude)]

  def _rewards(self, completions: Sequence[str],
               examples: Sequence[Example]) -> tuple[np.ndarray, np.ndarray]:
    if len(completions) != len(examples):
      raise ValueError(f"got {len(completions)} completions for {len(examples)} examples")
    hits = np.asarray([text_scan.over_limit(c) for c in completions], bool).reshape(len(examples))
    self.num_bound_hits += int(hits.sum())
    rewards = [countdown_reward(c, ex.meta["numbers"], ex.meta["target"], self.prompt_style)
               for c, ex in zip(completions, examples)]
    return np.asarray(rewards, dtype=np.float32).reshape(len(examples)), hits

  def reward(self, completions: Sequence[str], examples: Sequence[Example]) -> np.ndarray:
    """float32 ``[N]`` rewards in {0, 0.1, 1} (see module docstring)."""
    return self._rewards(completions, examples)[0]

  def example_outcomes(self, completions: Sequence[str], examples: Sequence[Example]) -> dict[str, np.ndarray]:
    """Per-item ``accuracy`` (reward 1), ``well_formed`` (reward > 0), ``mean_reward`` (the reward) and
    ``grader_bound_hits`` (0/1), float64 ``[N]`` each; :meth:`metrics` pools them."""
    r, hits = self._rewards(completions, examples)
    return {"accuracy": (r == CORRECT_REWARD).astype(np.float64), "well_formed": (r > 0).astype(np.float64),
            "mean_reward": r.astype(np.float64), "grader_bound_hits": hits.astype(np.float64)}

  def metrics(self, completions: Sequence[str], examples: Sequence[Example]) -> dict[str, float]:
    """``accuracy`` (reward 1), ``well_formed`` (reward > 0), ``mean_reward``,
    ``grader_bound_hits`` (count), ``num_examples``: :meth:`example_outcomes` pooled."""
    o = self.example_outcomes(completions, examples)
    n = len(examples)
    return {"accuracy": float(o["accuracy"].mean()) if n else 0.0,
            "well_formed": float(o["well_formed"].mean()) if n else 0.0,
            # the float32 rewards' mean, as before the outcomes existed (equal to the column's up to float32)
            "mean_reward": float(o["mean_reward"].astype(np.float32).mean()) if n else 0.0,
            "grader_bound_hits": float(o["grader_bound_hits"].sum()),
            "num_examples": float(n)}

  def grading_rules(self) -> str:
    """One line naming the grading rules (evaluation summary)."""
    return ("d1 parse_countdown_answers: last closed \\boxed{}, else last non-empty <answer> span, "
            "else the whole completion; \\times \\cdot × -> *, \\div ÷ -> /; 'E = N' grades E; exact "
            "value and number multiset; 1.0 / 0.1 well-formed / 0; completions > "
            f"{text_scan.MAX_COMPLETION_CHARS} chars score 0")
