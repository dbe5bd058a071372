"""4x4 Sudoku task (``sudoku4x4``): enumeration, puzzle generator, graders and data.

Grids are 16-character strings of digits in row-major order, ``'0'`` = blank (the format of
dllm-reasoning/d1 ``dataset/4x4_test_sudoku.csv``). A valid solution has every row, column and
2x2 box holding 1..4 exactly once; there are 288 such grids, enumerated here by backtracking.

Prompt styles (``prompt_style``):

* ``"plain"`` (tiny byte-level models): ``prompt = puzzle`` (16 digits; the tokenizer adds ``bos``,
  so ``prompt_len = 17``) and ``target = solution`` (16 digits; ``min_gen_length = 17`` with one
  EOS). The answer is the completion's first 16 characters after leading whitespace.
* ``"chat"`` (LLaDA-8B-Instruct, d1's protocol): d1's Sudoku evaluation prompt (d1
  ``eval/sudoku.py``: :data:`SYSTEM_PROMPT` and ``"Solve the following Sudoku puzzle: <puzzle>"``
  in LLaDA's chat template, then ``<reasoning>``); the answer is a 16-character string inside
  ``<answer>`` tags, read by :func:`extract_chat_answer` with d1's evaluation parser
  (``eval/parse_and_get_acc.py``, ``parse_sudoku_answers``): the first of its five patterns that
  finds a non-empty string (digits in a code fence inside the answer; the first answer span; the
  text after ``</answer>``; 16 digits before a ``</answer>``; a free-standing 16-digit number),
  whitespace removed, then padded with ``0`` or truncated to 16 characters for cell accuracy.
* ``"d1_train"``: d1's Sudoku training prompt (:func:`daca_jax.tasks.d1_train_prompts.sudoku_message`:
  the same system prompt and question, nothing pre-filled); answers are read as in ``"chat"``.

Rewards and metrics:

* ``reward`` (d1's reward): fraction of the puzzle's blank cells whose digit equals the stored
  solution (0 for a completion longer than :data:`daca_jax.tasks.text_scan.MAX_COMPLETION_CHARS`,
  a grader bound hit counted in the metric ``grader_bound_hits``).
* ``cell_accuracy`` (d1's reported Sudoku number): correct blank cells / all blank cells over the
  evaluation set (d1 sums cells over puzzles; its test puzzles all have 8 blanks, so this equals the
  mean reward there).
* ``strict_solved``: the answer is a valid complete grid keeping every given. Any valid
  completion counts, since d1's puzzles do not all have a unique solution (376 of 500 do).
* ``token_rewards`` (for the ``token_reward`` oracle credit; ``"plain"`` style only): each blank
  cell's token gets 1 if its digit equals the stored solution, else 0; givens and EOS padding carry
  none. Their sum divided by
  the number of blanks is d1's reward of an ASCII completion, exactly (a blank cell the completion
  does not reach is wrong and has no token).

Where the chat grader differs from d1's evaluation parser, and why: the completion is cut at the
first end-of-text marker and text after it is ignored (d1 reads patterns 3 and 5 across it; a
decode may keep text generated after the model's end); each pattern is matched in linear time
instead of with d1's regular expressions (same matches: ``\\d``/``\\s``/``\\w``/``\\b`` keep
Python's Unicode meaning). d1's training reward (``sudoku_reward_func``) reads the last answer span
and keeps only its digits; one grader serves training and evaluation here, with the evaluation
parser's rules (the two agree on answers written as 16 digits in one answer span).
"""
from __future__ import annotations

import functools
import os
import pathlib
from typing import Any, Collection, Sequence

import numpy as np

from daca_jax.data import local
from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks import d1_train_prompts
from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks import text_scan
from daca_jax.tasks.base import DATA_OPTIONS, TASKS, Example, Task
from daca_jax.tasks.tokenizer import Tokenizer

NUM_CELLS = 16
NUM_SOLUTION_GRIDS = 288  # documented fact; all_solution_grids() computes it.
D1_TEST_FILE = "sudoku/d1_test.csv"  # relative to the data dir (see ../shared/data/SOURCES.md)

# d1's Sudoku evaluation system prompt (dllm-reasoning/d1 eval/sudoku.py, SUDOKU_SYSTEM_PROMPT),
# verbatim; the question that follows it is "Solve the following Sudoku puzzle: <puzzle>\n".
SYSTEM_PROMPT = """
Please solve the following 4x4 Sudoku puzzle. The puzzle is provided as a 16-character string reading left-to-right, top-to-bottom, where '0' represents empty cells.

Rules:
- Fill empty cells with digits 1-4
- Each row must contain digits 1-4 exactly once
- Each column must contain digits 1-4 exactly once
- Each 2x2 box must contain digits 1-4 exactly once

Important: Your solution must be a COMPLETE 16-character string with only the digits 1-4, representing your final solved grid.

Respond in this exact format:
<reasoning>
Your step-by-step solving process
</reasoning>
<answer>
[16-character solution string with no spaces or separators]
</answer>
"""
_CHAT_REASONING = ("Each row, column and 2x2 box must hold 1-4 once; filling the blanks in order "
                   "leaves one digit for each.")

# Cell index groups (rows, columns, 2x2 boxes) of a row-major 4x4 grid.
_ROWS = tuple(tuple(4 * r + c for c in range(4)) for r in range(4))
_COLS = tuple(tuple(4 * r + c for r in range(4)) for c in range(4))
_BOXES = tuple(
    tuple(4 * (br + r) + bc + c for r in range(2) for c in range(2))
    for br in (0, 2) for bc in (0, 2))
# Bytes that str.lstrip() removes (the ASCII whitespace), for the token view of parse_completion.
_ASCII_SPACE = np.asarray([b for b in range(128) if chr(b).isspace()], np.int32)
# For each cell, the other cells that share a row, column or box with it.
_PEERS = tuple(
    tuple(sorted({j for g in _ROWS + _COLS + _BOXES if i in g for j in g} - {i}))
    for i in range(NUM_CELLS))


def _enumerate_grids() -> list[list[int]]:
  """Backtracking over cells 0..15 in order; yields grids in lexicographic order."""
  grid = [0] * NUM_CELLS
  out: list[list[int]] = []

  def fill(cell: int) -> None:
    if cell == NUM_CELLS:
      out.append(list(grid))
      return
    used = {grid[j] for j in _PEERS[cell] if j < cell}
    for digit in range(1, 5):
      if digit not in used:
        grid[cell] = digit
        fill(cell + 1)
    grid[cell] = 0

  fill(0)
  return out


@functools.lru_cache(maxsize=None)
def all_solution_grids() -> np.ndarray:
  """Returns every valid complete 4x4 Sudoku grid.

  Returns:
    Read-only int8 array ``[288, 16]``, row-major cells with digits 1..4, in lexicographic order.
  """
  grids = np.asarray(_enumerate_grids(), dtype=np.int8)
  grids.setflags(write=False)
  return grids


@functools.lru_cache(maxsize=None)
def _solution_strings() -> dict[str, int]:
  """Maps each solution grid's 16-digit string to its row in ``all_solution_grids()``."""
  return {"".join(map(str, g)): i for i, g in enumerate(all_solution_grids().tolist())}


@functools.lru_cache(maxsize=None)
def _agreement_masks() -> np.ndarray:
  """uint32 ``[288, 288]``: bit c of ``[g, h]`` is set iff grids g and h agree on cell c."""
  grids = all_solution_grids()
  eq = grids[:, None, :] == grids[None, :, :]
  weights = (1 << np.arange(NUM_CELLS)).astype(np.uint32)
  return (eq.astype(np.uint32) * weights).sum(axis=-1).astype(np.uint32)


def _parse_puzzle(puzzle: str) -> np.ndarray:
  if (not isinstance(puzzle, str) or len(puzzle) != NUM_CELLS
      or any(c not in "01234" for c in puzzle)):
    raise ValueError(
        f"a 4x4 sudoku puzzle must be {NUM_CELLS} digits in 0..4 (0 = blank), got {puzzle!r}")
  return np.frombuffer(puzzle.encode("ascii"), dtype=np.uint8).astype(np.int8) - ord("0")


def _matching_grids(puzzle: str) -> np.ndarray:
  """Boolean ``[288]``: which solution grids keep every given of ``puzzle``."""
  cells = _parse_puzzle(puzzle)
  given = cells != 0
  return np.all(all_solution_grids()[:, given] == cells[given], axis=1)


def count_solutions(puzzle: str) -> int:
  """Number of valid complete grids that keep every given of ``puzzle``.

  Args:
    puzzle: 16 digits in 0..4, ``'0'`` = blank.

  Returns:
    The count (0 if the givens contradict each other).

  Raises:
    ValueError: ``puzzle`` is not 16 digits in 0..4.
  """
  return int(_matching_grids(puzzle).sum())


def is_valid_solution(puzzle: str, grid: str) -> bool:
  """Whether ``grid`` is a valid complete 4x4 Sudoku that keeps every given of ``puzzle``.

  Args:
    puzzle: 16 digits in 0..4, ``'0'`` = blank.
    grid: candidate solution; any string (malformed candidates give False, never an error).

  Returns:
    True iff ``grid`` is one of the 288 valid grids and agrees with every non-zero cell of
    ``puzzle``.

  Raises:
    ValueError: ``puzzle`` is malformed.
  """
  _parse_puzzle(puzzle)
  if not isinstance(grid, str) or grid not in _solution_strings():
    return False
  return all(p == "0" or p == g for p, g in zip(puzzle, grid))


def _popcounts() -> np.ndarray:
  x = np.arange(1 << NUM_CELLS, dtype=np.uint32)
  counts = np.zeros_like(x)
  for b in range(NUM_CELLS):
    counts += (x >> b) & 1
  return counts


@functools.lru_cache(maxsize=None)
def max_unique_blanks() -> int:
  """Largest number of blanks for which some 4x4 puzzle has exactly one solution.

  Computed by enumeration: for k = 0, 1, ... givens, every grid and every set of k given cells is
  tested (a puzzle from grid g with given cells S is unique iff no other grid agrees with g on all
  of S). Uniqueness is monotone in the givens, so every blank count up to the result is feasible.

  Returns:
    The maximum (12, i.e. at least 4 givens are needed).
  """
  agree = _agreement_masks()
  popcount = _popcounts()
  for k in range(NUM_CELLS + 1):
    subsets = np.flatnonzero(popcount == k).astype(np.uint32)
    for g in range(agree.shape[0]):
      hits = ((agree[g][:, None] & subsets[None, :]) == subsets[None, :]).sum(axis=0)
      if np.any(hits == 1):
        return NUM_CELLS - k
  raise AssertionError("unreachable: a full grid is always a unique puzzle")


def _check_num_blanks(num_blanks: Any) -> tuple[int, int]:
  """Validates ``task.num_blanks`` (int or inclusive (lo, hi)); returns ``(lo, hi)``."""
  hi_max = max_unique_blanks()
  allowed = (f"an int or an inclusive (lo, hi) range within 1..{hi_max} (4x4 puzzles with more "
             f"than {hi_max} blanks never have a unique solution)")

  def is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)

  if is_int(num_blanks):
    lo = hi = int(num_blanks)
  elif (isinstance(num_blanks, (tuple, list)) and len(num_blanks) == 2
        and all(is_int(x) for x in num_blanks)):
    lo, hi = int(num_blanks[0]), int(num_blanks[1])
  else:
    raise ConfigError("task.num_blanks", num_blanks, allowed)
  if not 1 <= lo <= hi <= hi_max:
    raise ConfigError("task.num_blanks", num_blanks, allowed)
  return lo, hi


def generate_puzzles(
    num: int,
    num_blanks: int | tuple[int, int],
    seed: int,
    exclude: Collection[str] = frozenset(),
    max_consecutive_failures: int = 20_000,
) -> list[tuple[str, str]]:
  """Generates distinct 4x4 puzzles that have exactly one solution.

  Each attempt draws (with ``np.random.default_rng(seed)``) a solution grid uniformly from the 288,
  a blank count (``num_blanks``, or uniform in the inclusive range), and that many distinct cells
  to blank. The puzzle is kept iff it has exactly one solution, is not in ``exclude`` and was not
  generated before. Deterministic for a given ``seed``.

  Args:
    num: number of puzzles, >= 0.
    num_blanks: blanks per puzzle (int) or an inclusive ``(lo, hi)`` range drawn per puzzle.
    seed: seed of the numpy Generator.
    exclude: puzzle strings that must not be generated (e.g. the evaluation set).
    max_consecutive_failures: give up after this many attempts in a row that add nothing.

  Returns:
    ``list[(puzzle, solution)]`` of length ``num``: 16-digit strings, ``'0'`` = blank.

  Raises:
    ConfigError (a ValueError): ``num_blanks`` is malformed or outside ``1..max_unique_blanks()``;
      the message names ``task.num_blanks``.
    ValueError: ``num`` is negative, or not enough distinct unique puzzles exist (message names
      ``task.num_blanks``).
  """
  lo, hi = _check_num_blanks(num_blanks)
  if not isinstance(exclude, (set, frozenset)):
    exclude = frozenset(exclude)
  if num < 0:
    raise ValueError(f"generate_puzzles: num must be >= 0, got {num}")
  grids = all_solution_grids()
  grid_strs = ["".join(map(str, g)) for g in grids.tolist()]
  agree = _agreement_masks()
  rng = np.random.default_rng(seed)
  full = (1 << NUM_CELLS) - 1
  seen: set[str] = set()
  out: list[tuple[str, str]] = []
  failures = 0
  while len(out) < num:
    g = int(rng.integers(len(grids)))
    k = lo if lo == hi else int(rng.integers(lo, hi + 1))
    blanks = rng.choice(NUM_CELLS, size=k, replace=False)
    given_mask = full
    for c in blanks.tolist():
      given_mask &= ~(1 << c)
    sol = grid_strs[g]
    chars = list(sol)
    for c in blanks.tolist():
      chars[c] = "0"
    puzzle = "".join(chars)
    unique = int(np.count_nonzero((agree[g] & given_mask) == given_mask)) == 1
    if unique and puzzle not in seen and puzzle not in exclude:
      seen.add(puzzle)
      out.append((puzzle, sol))
      failures = 0
    else:
      failures += 1
      if failures >= max_consecutive_failures:
        raise DataError(
            f"could only generate {len(out)} of {num} distinct unique-solution 4x4 puzzles with "
            f"task.num_blanks={num_blanks!r} ({len(exclude)} puzzles excluded; "
            f"{max_consecutive_failures} attempts in a row found nothing new); "
            f"use a different task.num_blanks or fewer examples")
  return out


def parse_completion(text: str) -> str:
  """Answer grid of a ``"plain"`` completion: its first 16 characters after leading whitespace.

  The result may be shorter than 16 characters or hold non-digits; such cells count as wrong.
  """
  return text.lstrip()[:NUM_CELLS]


def _fenced_digits(text: str, start: int) -> str | None:
  """d1 pattern 1 after the first ``<answer>`` (at ``start``): ``.*?```\\s*([\\d\\s]+)```` ``."""
  fence = text.find("```", start)
  while fence >= 0:
    j = fence + 3
    while j < len(text) and (text[j].isdecimal() or text[j].isspace()):
      j += 1
    if j > fence + 3 and text.startswith("```", j):
      return text[fence + 3:j]  # the first match decides (re.search); a later fence is not tried
    fence = text.find("```", fence + 1)  # the run held no backtick: the next fence is at or after j
  return None


def _digits_before_close(text: str) -> str | None:
  """d1 pattern 4: ``.*?(\\d{16})\\s*</answer>`` (the first ``</answer>`` that 16 digits and then
  only whitespace precede)."""
  close = text.find("</answer>")
  while close >= 0:
    end = close
    while end > 0 and text[end - 1].isspace():
      end -= 1
    if end >= NUM_CELLS and all(c.isdecimal() for c in text[end - NUM_CELLS:end]):
      return text[end - NUM_CELLS:end]
    close = text.find("</answer>", close + 1)
  return None


def _free_standing_digits(text: str) -> str | None:
  """d1 pattern 5: ``\\b(\\d{16})\\b`` (the first maximal run of word characters that is exactly
  16 decimal digits)."""
  i, n = 0, len(text)
  while i < n:
    if text[i].isalnum() or text[i] == "_":
      j = i
      while j < n and (text[j].isalnum() or text[j] == "_"):
        j += 1
      if j - i == NUM_CELLS and all(c.isdecimal() for c in text[i:j]):
        return text[i:j]
      i = j
    else:
      i += 1
  return None


def extract_chat_answer(completion: str) -> str:
  """The answer string of a ``"chat"`` completion by d1's evaluation parser, whitespace removed
  ("" when no pattern finds one); see the module docstring. Linear time.

  The patterns, in order (the first non-empty result wins): 1. digits in a code fence after the
  first ``<answer>``; 2. the first ``<answer>`` up to ``</answer>`` (or the end-of-text marker);
  3. the text after the first ``</answer>``; 4. 16 digits before a ``</answer>``; 5. a
  free-standing 16-digit number.
  """
  if text_scan.over_limit(completion):
    return ""
  text = fmt.clean_completion(completion)
  cut = len(text) < len(completion)
  found: list[str | None] = []
  opening = text.find("<answer>")
  closing = text.find("</answer>")
  if opening >= 0:
    start = opening + len("<answer>")
    found.append(_fenced_digits(text, start))
    end = text.find("</answer>", start)
    found.append(text[start:end] if end >= 0 else (text[start:] if cut else None))
  if closing >= 0:
    found.append(text[closing + len("</answer>"):])
  for candidate in found:
    if candidate is not None and candidate.strip():
      return "".join(c for c in candidate if not c.isspace())
  for pattern in (_digits_before_close, _free_standing_digits):
    candidate = pattern(text)
    if candidate:
      return candidate
  return ""


def answer_grid(completion: str, prompt_style: str = "plain") -> str:
  """The 16-character grid graded for ``completion``: ``"plain"``: :func:`parse_completion`;
  ``"chat"``: :func:`extract_chat_answer` padded with ``0`` / truncated to 16 (d1), "" if empty."""
  if prompt_style == "plain":
    return "" if text_scan.over_limit(completion) else parse_completion(completion)
  answer = extract_chat_answer(completion)
  return (answer + "0" * NUM_CELLS)[:NUM_CELLS] if answer else ""


def correct_cells(answer: str, puzzle: str, solution: str) -> tuple[int, int]:
  """``(blank cells of puzzle where answer equals solution, blank cells)``."""
  blanks = [i for i, c in enumerate(puzzle) if c == "0"]
  return sum(1 for i in blanks if i < len(answer) and answer[i] == solution[i]), len(blanks)


def cell_reward(completion: str, puzzle: str, solution: str, prompt_style: str = "plain") -> float:
  """d1's reward: fraction of blank cells where the completion's answer equals ``solution``.

  Args:
    completion: decoded completion text (any string).
    puzzle: 16 digits, ``'0'`` = blank.
    solution: the stored 16-digit solution.
    prompt_style: how the answer is read (:func:`answer_grid`).

  Returns:
    A float in [0, 1]; 1.0 for a puzzle without blanks.
  """
  good, blanks = correct_cells(answer_grid(completion, prompt_style), puzzle, solution)
  return good / blanks if blanks else 1.0


@TASKS.register("sudoku4x4")
class Sudoku4x4Task(Task):
  """4x4 Sudoku: 16-digit puzzle in, 16-digit solution out.

  Args:
    data_dir: data directory (config field ``data.data_dir``): ``None`` = no local data; ``""`` =
      :func:`daca_jax.data.local.default_data_dir` if it exists; otherwise a directory that must
      exist. The d1 test set is read from ``<data_dir>/sudoku/d1_test.csv`` when present.
    eval_path: explicit evaluation CSV (``Puzzle,Solution`` header, d1 layout); overrides
      ``data_dir``.
    num_blanks: blanks per generated puzzle (int or inclusive ``(lo, hi)``), used for training
      examples and for the generated fallback evaluation set.
    eval_size: size of the generated fallback evaluation set.
    seed: seed of the generated fallback evaluation set.
    prompt_style: ``"plain"``, ``"chat"`` (d1's evaluation prompt and answer format) or ``"d1_train"``
      (d1's training prompt); see the module docstring.
    tokenizer: the model's tokenizer (None: the byte tokenizer).

  Raises:
    FileNotFoundError: ``eval_path`` is given but does not exist (message names
      ``task.eval_path``), or ``data_dir`` is given but does not exist (names ``data.data_dir``).
    ConfigError: bad ``num_blanks`` / ``eval_size`` / ``prompt_style``, or the chat style with a
      tokenizer that has no chat template.
  """

  primary_metric = "strict_solved"

  name = "sudoku4x4"
  prompt_styles = fmt.REASONING_PROMPT_STYLES
  OPTIONS = {**DATA_OPTIONS, "num_blanks": 8, "eval_size": 500, "seed": 1234, "prompt_style": "plain"}

  def __init__(
      self,
      data_dir: str | os.PathLike[str] | None = None,
      eval_path: str = "",
      num_blanks: int | tuple[int, int] = 8,
      eval_size: int = 500,
      seed: int = 1234,
      prompt_style: str = "plain",
      tokenizer: Tokenizer | None = None,
  ):
    self.prompt_style = fmt.check_prompt_style(prompt_style, self.prompt_styles)
    self._set_tokenizer(tokenizer)
    _check_num_blanks(num_blanks)
    if (isinstance(eval_size, bool) or not isinstance(eval_size, (int, np.integer))
        or eval_size < 1):
      raise ConfigError("task.eval_size", eval_size, "a positive int")
    self.num_blanks: int | tuple[int, int] = (
        tuple(num_blanks) if isinstance(num_blanks, (tuple, list)) else int(num_blanks))
    self.eval_size = int(eval_size)
    self.seed = int(seed)
    self.eval_path = str(eval_path) if eval_path else ""
    if self.eval_path and not pathlib.Path(self.eval_path).expanduser().is_file():
      raise FileNotFoundError(f"task.eval_path={self.eval_path!r}: file does not exist")
    self.data_dir = None if data_dir is None else local.resolve_data_dir(str(data_dir))
    self._eval: tuple[list[Example], str] | None = None
    self.num_bound_hits = 0
    self.has_token_rewards = self.prompt_style == "plain"
    # Prompts and targets have one length in bytes for every puzzle (16 digits each); another tokenizer
    # may merge digits, so each digit's run is probed.
    probes = self._examples([(d * NUM_CELLS, "1" * NUM_CELLS) for d in "01234"])
    self.prompt_len = max(len(self.prompt_ids(probe.prompt)) for probe in probes)
    self.min_gen_length = 1 + len(self.tokenizer.encode(probes[0].target))

  def _examples(self, rows: Sequence[tuple[str, str]]) -> list[Example]:
    if self.prompt_style == "plain":
      return [Example(prompt=p, target=s, meta={"puzzle": p, "solution": s}) for p, s in rows]
    return [Example(prompt=self._templated_prompt(p),
                    target=fmt.reasoning_answer_target(self.prompt_style, _CHAT_REASONING, s),
                    meta={"puzzle": p, "solution": s}) for p, s in rows]

  def _templated_prompt(self, puzzle: str) -> str:
    """d1's evaluation prompt (chat) or training prompt (d1_train) of ``puzzle``."""
    if self.prompt_style == fmt.D1_TRAIN:
      return self.chat_template.user_turn(d1_train_prompts.sudoku_message(SYSTEM_PROMPT, puzzle))
    return fmt.d1_chat_prompt(self.chat_template, SYSTEM_PROMPT, f"Solve the following Sudoku puzzle: {puzzle}\n")

  def _load_csv(self, path: pathlib.Path) -> list[Example]:
    rows = local.read_sudoku_csv(path)
    for i, (puzzle, solution) in enumerate(rows):
      if not is_valid_solution(puzzle, solution):
        raise DataError(
            f"{path}: data row {i + 1}: {solution!r} is not a valid solution of {puzzle!r}")
    if not rows:
      raise DataError(f"{path}: no puzzles")
    return self._examples(rows)

  def eval_examples(self) -> tuple[list[Example], str]:
    """Returns ``(examples, source)``; loaded once and cached.

    Order of preference: ``eval_path``; ``<data_dir>/sudoku/d1_test.csv``; a GENERATED held-out set
    of ``eval_size`` puzzles (seed ``seed``), with a source string saying d1's file was not found.
    """
    if self._eval is None:
      if self.eval_path:
        path = pathlib.Path(self.eval_path).expanduser()
        examples = self._load_csv(path)
        source = f"{path} (task.eval_path, {len(examples)} puzzles)"
      else:
        d1 = None if self.data_dir is None else self.data_dir / D1_TEST_FILE
        if d1 is not None and d1.is_file():
          examples = self._load_csv(d1)
          source = (f"d1 4x4 Sudoku test set {d1} ({len(examples)} puzzles; dllm-reasoning/d1 "
                    f"dataset/4x4_test_sudoku.csv)")
        else:
          where = (f"no data dir (data.data_dir unset and {local.default_data_dir()} absent)"
                   if d1 is None else f"{d1} does not exist")
          rows = generate_puzzles(self.eval_size, self.num_blanks, seed=self.seed)
          examples = self._examples(rows)
          source = (f"GENERATED held-out set of {len(examples)} unique-solution puzzles "
                    f"(num_blanks={self.num_blanks!r}, seed={self.seed}): d1's test file "
                    f"{D1_TEST_FILE} was not found ({where})")
      self._eval = (examples, source)
    return list(self._eval[0]), self._eval[1]

  def train_examples(self, num: int, seed: int) -> list[Example]:
    """Generates ``num`` distinct unique-solution puzzles, none of them in the evaluation set."""
    exclude = frozenset(ex.meta["puzzle"] for ex in self.eval_examples()[0])
    return self._examples(generate_puzzles(num, self.num_blanks, seed=seed, exclude=exclude))

  def _grade(self, completions: Sequence[str],
             examples: Sequence[Example]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """``(answer grids, correct blank cells [N], blank cells [N], bound hits [N])``."""
    self._check_lengths(completions, examples)
    hits = np.asarray([text_scan.over_limit(c) for c in completions], bool).reshape(len(examples))
    self.num_bound_hits += int(hits.sum())
    answers = [answer_grid(c, self.prompt_style) for c in completions]
    cells = np.asarray([correct_cells(a, ex.meta["puzzle"], ex.meta["solution"])
                        for a, ex in zip(answers, examples)], np.int64).reshape(len(examples), 2)
    return answers, cells[:, 0], cells[:, 1], hits

  def reward(self, completions: Sequence[str], examples: Sequence[Example]) -> np.ndarray:
    """d1's reward per completion: float32 ``[N]`` in [0, 1] (see :func:`cell_reward`)."""
    _, good, blanks, _ = self._grade(completions, examples)
    return np.where(blanks > 0, good / np.maximum(blanks, 1), 1.0).astype(np.float32)

  has_token_rewards = True  # the "plain" style; an instance of the "chat" style sets False

  @staticmethod
  def _check_lengths(completions: Sequence[Any], examples: Sequence[Example]) -> None:
    if len(completions) != len(examples):
      raise ValueError(f"got {len(completions)} completions for {len(examples)} examples")

  def token_rewards(self, completion_ids: np.ndarray,
                    examples: Sequence[Example]) -> tuple[np.ndarray, np.ndarray]:
    """Per-cell rewards: the token of blank cell c (the c-th byte after leading whitespace, as
    :func:`parse_completion` reads it) gets 1.0 if it is the solution's digit, else 0.0.
    ``"plain"`` style only: a chat answer's cells have no fixed token positions.

    Args:
      completion_ids: int32 ``[N, L]`` byte-tokenizer completion tokens.
      examples: the N examples.
    Returns:
      ``(rewards, mask)`` float32 ``[N, L]``; ``mask`` is 1 on the blank cells that the completion
      reaches (a cell past the EOS or past L is wrong and carries no token).
    """
    if not self.has_token_rewards:
      raise NotImplementedError("sudoku4x4 token rewards need prompt_style='plain' (chat answers have "
                                "no fixed token positions)")
    ids = np.asarray(completion_ids)
    self._check_lengths(list(ids), examples)
    n, length = ids.shape
    rewards = np.zeros((n, length), np.float32)
    mask = np.zeros((n, length), np.float32)
    space = np.isin(ids, _ASCII_SPACE)
    for row, ex in enumerate(examples):
      offset = int(np.argmin(space[row])) if not space[row].all() else length
      eos = np.flatnonzero(ids[row] == self.tokenizer.eos_id)
      end = int(eos[0]) if eos.size else length
      for cell, (given, digit) in enumerate(zip(ex.meta["puzzle"], ex.meta["solution"])):
        pos = offset + cell
        if given == "0" and pos < end:
          mask[row, pos] = 1.0
          rewards[row, pos] = float(ids[row, pos] == ord(digit))
    return rewards, mask

  def example_outcomes(self, completions: Sequence[str], examples: Sequence[Example]) -> dict[str, np.ndarray]:
    """Per-puzzle outcomes, float64 ``[N]`` each (:meth:`metrics` pools them).

    Returns:
      ``strict_solved``, ``exact_match`` (0/1); ``cells_correct`` and ``cells_blank`` (counts: the set's
      ``cell_accuracy`` is Σ cells_correct / Σ cells_blank); ``cell_accuracy`` (the puzzle's own fraction,
      1.0 without blanks: its mean is the set's when every puzzle has as many blanks, as in d1's test set
      and a generated set of one ``num_blanks``); ``grader_bound_hits`` (0/1).
    """
    answers, good, blanks, hits = self._grade(completions, examples)
    n = len(examples)
    return {
        "strict_solved": np.asarray([is_valid_solution(ex.meta["puzzle"], a) for a, ex in zip(answers, examples)],
                                    np.float64).reshape(n),
        "exact_match": np.asarray([a == ex.meta["solution"] for a, ex in zip(answers, examples)],
                                  np.float64).reshape(n),
        "cell_accuracy": np.where(blanks > 0, good / np.maximum(blanks, 1), 1.0).astype(np.float64),
        "cells_correct": good.astype(np.float64),
        "cells_blank": blanks.astype(np.float64),
        "grader_bound_hits": hits.astype(np.float64),
    }

  def metrics(self, completions: Sequence[str], examples: Sequence[Example]) -> dict[str, float]:
    """Evaluation metrics, pooled from :meth:`example_outcomes`.

    Returns:
      ``strict_solved``: fraction of completions whose answer is a valid complete grid keeping the
      givens (any valid grid counts); ``cell_accuracy``: correct blank cells / blank cells, summed
      over the completions (d1's Sudoku accuracy); ``exact_match``: fraction equal to the stored
      solution; ``grader_bound_hits``: completions not graded (too long); ``num_examples``: N.
      Rates are 0.0 when N = 0.
    """
    o = self.example_outcomes(completions, examples)
    n = len(examples)
    total = float(o["cells_blank"].sum())
    return {
        "strict_solved": float(o["strict_solved"].sum()) / n if n else 0.0,
        "cell_accuracy": (float(o["cells_correct"].sum()) / total if total else float(n > 0)) if n else 0.0,
        "exact_match": float(o["exact_match"].sum()) / n if n else 0.0,
        "grader_bound_hits": float(o["grader_bound_hits"].sum()),
        "num_examples": float(n),
    }

  def grading_rules(self) -> str:
    """One line naming the grading rules (evaluation summary)."""
    read = ("first 16 characters after leading whitespace" if self.prompt_style == "plain" else
            "d1 parse_sudoku_answers (fenced digits in <answer>, first <answer> span, text after "
            "</answer>, 16 digits before </answer>, free-standing 16 digits; whitespace removed; "
            "padded with 0 / cut to 16)")
    return (f"{read}; cell accuracy = correct blank cells / blank cells (d1); strict_solved = any "
            f"valid grid keeping the givens; completions > {text_scan.MAX_COMPLETION_CHARS} chars "
            "score 0")
