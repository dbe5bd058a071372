"""4x4 Sudoku grids: the 288 valid grids, solution counting, and the unique-solution puzzle generator.

Grids are 16-character strings of digits in row-major order, ``'0'`` = blank (the format of
dllm-reasoning/d1 ``dataset/4x4_test_sudoku.csv``). A valid solution has every row, column and
2x2 box holding 1..4 exactly once; there are 288 such grids, enumerated here by backtracking.
The task (:mod:`daca_jax.tasks.sudoku`) re-exports every public name.
"""
from __future__ import annotations

import functools
from typing import Any, Collection

import numpy as np

from daca_jax.errors import ConfigError, DataError

NUM_CELLS = 16
NUM_SOLUTION_GRIDS = 288  # documented fact; all_solution_grids() computes it.

# Cell index groups (rows, columns, 2x2 boxes) of a row-major 4x4 grid.
_ROWS = tuple(tuple(4 * r + c for c in range(4)) for r in range(4))
_COLS = tuple(tuple(4 * r + c for r in range(4)) for c in range(4))
_BOXES = tuple(
    tuple(4 * (br + r) + bc + c for r in range(2) for c in range(2))
    for br in (0, 2) for bc in (0, 2))
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


def check_num_blanks(num_blanks: Any) -> tuple[int, int]:
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
  lo, hi = check_num_blanks(num_blanks)
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
