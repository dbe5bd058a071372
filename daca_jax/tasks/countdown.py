"""Countdown with three numbers (``countdown``): generator, exhaustive solver, grader and data.

An item is three numbers and a target; the answer is an arithmetic expression with ``+ - * /`` and
parentheses that uses each number exactly once and equals the target (d1's ``countdown_cd3`` task;
its 256 test items use numbers and targets in 1..100, all solvable).

Reward (d1's values: 1.0 / 0.1 / 0), graded with the project's own parser
(:func:`daca_jax.tasks.arith.parse_expression`; nothing is ``eval``-ed):

* 1.0: the answer is a well-formed expression whose integer literals are exactly the item's numbers
  (as a multiset) and whose exact value equals the target;
* 0.1: a well-formed expression that is wrong (other value, or numbers missing, reused or extra);
* 0.0: no answer, or an answer that is not a well-formed expression (including division by zero,
  more than 256 characters, or nesting deeper than 32).

Where this differs from d1 (``diffu-grpo/reward_func.py``, ``compute_score``), knowingly:

* d1 gives 0.1 to ANY text inside ``<answer>`` tags (unparsable text and division by zero included)
  and 0 only when the tags are missing; here malformed answers get 0, so the format bonus rewards
  well-formed expressions only.
* d1 ``eval``s the answer, so Python syntax such as ``2**3``, ``7//2`` or ``3.0`` could score 1.0;
  here those are malformed. Unary ``+``/``-`` are accepted, as in d1.
* d1 compares ``abs(value - target) < 1e-5``; here the comparison is exact. For numbers <= 100 the
  two agree: a non-integer value of three such numbers has a denominator <= 10^4, so it is >= 1e-4
  away from any integer.
* An answer written as ``expr = target`` is malformed here (0); d1 gives it 0.1 (the target's digits
  spoil its number check).

Prompt styles (``prompt_style``): ``"plain"`` (tiny byte model): prompt ``"30 100 93=23"``,
completion = the bare expression (an ``<answer>`` tag, if present, is used instead);
``"chat"``: LLaDA chat prompt, reasoning then the expression in ``<answer>`` tags (the last complete
``<answer>...</answer>`` span is graded, as in d1).
"""
from __future__ import annotations

import os
import pathlib
from typing import Collection, Sequence

import numpy as np

from daca_jax.data import local
from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks.arith import ExpressionError, parse_expression, solve_three, three_number_expressions
from daca_jax.tasks.base import TASKS, Example, Task
from daca_jax.tasks.tokenizer import ByteTokenizer

D1_TEST_FILE = "countdown/d1_cd3_test.jsonl"  # relative to the data dir (../shared/data/SOURCES.md)
MIN_NUMBER, MAX_NUMBER = 1, 100  # range of d1's numbers and targets
CORRECT_REWARD, FORMAT_REWARD = 1.0, 0.1  # d1's score / format_score


def extract_expression(completion: str, prompt_style: str) -> str | None:
  """The answer text graded for ``completion``: the last ``<answer>`` span; for ``"plain"`` without
  one, the whole completion (stripped). None when a chat completion has no complete answer tag."""
  tagged = fmt.extract_answer_tag(completion)
  if tagged is not None or prompt_style == "chat":
    return tagged
  return fmt.clean_completion(completion).strip()


def grade_expression(answer: str | None, numbers: Sequence[int], target: int) -> float:
  """Reward of an extracted answer (see module docstring): 1.0, 0.1 or 0.0."""
  if answer is None:
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
  """d1-valued Countdown reward of a decoded completion (1.0 / 0.1 / 0.0)."""
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


def _parse_row(row: dict, where: str) -> tuple[tuple[int, int, int], int]:
  try:
    numbers = tuple(int(x) for x in str(row["input"]).split(","))
    target = int(row["output"])
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
      exists). The d1 test set is read from ``<data_dir>/countdown/d1_cd3_test.jsonl`` when present.
    eval_path: explicit evaluation file in d1's JSONL layout; overrides ``data_dir``.
    eval_size: size of the generated fallback evaluation set.
    seed: seed of the generated fallback evaluation set.
    prompt_style: ``"plain"`` or ``"chat"`` (see module docstring).

  Raises:
    ConfigError: bad ``eval_size`` or ``prompt_style``.
    FileNotFoundError: ``eval_path`` or ``data_dir`` is given but does not exist.
  """

  name = "countdown"

  def __init__(self, data_dir: str | os.PathLike[str] | None = None, eval_path: str = "",
               eval_size: int = 256, seed: int = 1234, prompt_style: str = "plain"):
    self.tokenizer = ByteTokenizer()
    self.prompt_style = fmt.check_prompt_style(prompt_style)
    if isinstance(eval_size, bool) or not isinstance(eval_size, (int, np.integer)) or eval_size < 1:
      raise ConfigError("task.eval_size", eval_size, "a positive int")
    self.eval_size, self.seed = int(eval_size), int(seed)
    self.eval_path = str(eval_path) if eval_path else ""
    if self.eval_path and not pathlib.Path(self.eval_path).expanduser().is_file():
      raise FileNotFoundError(f"task.eval_path={self.eval_path!r}: file does not exist")
    self.data_dir = None if data_dir is None else local.resolve_data_dir(str(data_dir))
    # Longest prompt / answer: three 3-digit numbers, e.g. "(100-100)/100" (13 characters).
    widest = self.make_example((100, 100, 100), 100, "(100-100)/100")
    self.prompt_len = len(self.tokenizer.encode(widest.prompt)) + 1
    self.min_gen_length = len(self.tokenizer.encode(widest.target)) + 1
    self._eval: tuple[list[Example], str] | None = None

  def make_example(self, numbers: Sequence[int], target: int, solution: str | None = None) -> Example:
    """Formats one item; ``solution`` (default: the solver's first expression) is the SFT target."""
    if solution is None:
      solutions = solve_three(numbers, target)
      if not solutions:
        raise ValueError(f"{tuple(numbers)} cannot reach {target}")
      solution = solutions[0]
    meta = {"numbers": tuple(int(x) for x in numbers), "target": int(target)}
    if self.prompt_style == "plain":
      return Example(prompt=f"{' '.join(map(str, numbers))}={target}", target=solution, meta=meta)
    question = (f"Using the numbers {list(numbers)}, write an arithmetic expression that equals "
                f"{target}. Use each number exactly once, with + - * / and parentheses.")
    value = parse_expression(solution).value
    reasoning = f"Try {solution}: it uses {', '.join(map(str, numbers))} once each and equals {value}."
    return Example(prompt=fmt.chat_prompt(question),
                   target=fmt.reasoning_target(reasoning, solution), meta=meta)

  def eval_examples(self) -> tuple[list[Example], str]:
    """Returns ``(examples, source)``: ``eval_path``, else d1's test file, else a GENERATED set."""
    if self._eval is None:
      path = pathlib.Path(self.eval_path).expanduser() if self.eval_path else (
          None if self.data_dir is None else self.data_dir / D1_TEST_FILE)
      if path is not None and path.is_file():
        rows = [_parse_row(r, f"{path}: record {i}")
                for i, r in enumerate(local.read_json_records(path))]
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

  def train_examples(self, num: int, seed: int) -> list[Example]:
    """Generates ``num`` distinct items (none in the evaluation set) with solver SFT targets."""
    exclude = frozenset((tuple(sorted(ex.meta["numbers"])), ex.meta["target"])
                        for ex in self.eval_examples()[0])
    return [self.make_example(n, t) for n, t in generate_items(num, seed, exclude=exclude)]

  def _rewards(self, completions: Sequence[str], examples: Sequence[Example]) -> np.ndarray:
    if len(completions) != len(examples):
      raise ValueError(f"got {len(completions)} completions for {len(examples)} examples")
    return np.asarray([countdown_reward(c, ex.meta["numbers"], ex.meta["target"], self.prompt_style)
                       for c, ex in zip(completions, examples)], dtype=np.float32).reshape(len(examples))

  def reward(self, completions: Sequence[str], examples: Sequence[Example]) -> np.ndarray:
    """float32 ``[N]`` rewards in {0, 0.1, 1} (see module docstring)."""
    return self._rewards(completions, examples)

  def metrics(self, completions: Sequence[str], examples: Sequence[Example]) -> dict[str, float]:
    """``accuracy`` (reward 1), ``well_formed`` (reward > 0), ``mean_reward``, ``num_examples``."""
    r = self._rewards(completions, examples)
    n = len(examples)
    return {"accuracy": float(np.mean(r == CORRECT_REWARD)) if n else 0.0,
            "well_formed": float(np.mean(r > 0)) if n else 0.0,
            "mean_reward": float(r.mean()) if n else 0.0,
            "num_examples": float(n)}

