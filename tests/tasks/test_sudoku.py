"""Tests for the 4x4 Sudoku task (daca_jax.tasks.sudoku) and the task base class.

Oracles are independent of the module under test: grids are enumerated here from row
permutations, validity is checked in plain Python, and uniqueness of generated puzzles is checked by
brute force over all 4**blanks fillings.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from daca_jax.data import local
from daca_jax.errors import ConfigError
from daca_jax.tasks import base, sudoku
from daca_jax.tasks.base import Example, make_task

D1_SUDOKU = local.default_data_dir() / "sudoku" / "d1_test.csv"  # $DACA_DATA_DIR or ../shared/data


def _plain_valid(grid) -> bool:
  """Plain-Python validity check of a complete 4x4 grid (sequence of 16 ints)."""
  g = [int(x) for x in grid]
  if len(g) != 16:
    return False
  groups = [[4 * r + c for c in range(4)] for r in range(4)]
  groups += [[4 * r + c for r in range(4)] for c in range(4)]
  groups += [[4 * (br + r) + bc + c for r in range(2) for c in range(2)]
             for br in (0, 2) for bc in (0, 2)]
  return all(sorted(g[i] for i in grp) == [1, 2, 3, 4] for grp in groups)


def _independent_grids() -> list[str]:
  """All valid grids, built row by row from permutations (no backtracking over cells)."""
  perms = list(itertools.permutations((1, 2, 3, 4)))
  out = []
  for rows in itertools.product(perms, repeat=4):
    flat = [x for row in rows for x in row]
    if _plain_valid(flat):
      out.append("".join(map(str, flat)))
  return out


INDEPENDENT_GRIDS = _independent_grids()  # ~0.5 s, computed once.


def _independent_solutions(puzzle: str) -> list[str]:
  return [g for g in INDEPENDENT_GRIDS if all(p in ("0", c) for p, c in zip(puzzle, g))]


def _brute_force_count(puzzle: str) -> int:
  """Counts valid fillings of the blanks among all 4**blanks candidates (numpy, chunked)."""
  blanks = [i for i, c in enumerate(puzzle) if c == "0"]
  base_grid = np.array([int(c) for c in puzzle], dtype=np.int8)
  groups = [[4 * r + c for c in range(4)] for r in range(4)]
  groups += [[4 * r + c for r in range(4)] for c in range(4)]
  groups += [[4 * (br + r) + bc + c for r in range(2) for c in range(2)]
             for br in (0, 2) for bc in (0, 2)]
  total = 4 ** len(blanks)
  count = 0
  chunk = 1 << 18
  for start in range(0, total, chunk):
    idx = np.arange(start, min(total, start + chunk), dtype=np.int64)
    grids = np.tile(base_grid, (idx.size, 1))
    for j, cell in enumerate(blanks):
      grids[:, cell] = (idx // 4 ** j) % 4 + 1
    ok = np.ones(idx.size, dtype=bool)
    for grp in groups:
      bits = np.zeros(idx.size, dtype=np.int32)
      for cell in grp:
        bits |= 1 << grids[:, cell].astype(np.int32)
      ok &= bits == 0b11110
    count += int(ok.sum())
  return count


def _require_d1() -> list[tuple[str, str]]:
  if not D1_SUDOKU.is_file():
    pytest.skip(f"shared benchmark data not found at {D1_SUDOKU} (set $DACA_DATA_DIR or place it at ../shared/data)")
  from daca_jax.data.local import read_sudoku_csv
  return read_sudoku_csv(D1_SUDOKU)


# ----------------------------------------------------------------------------- enumeration


def test_exactly_288_grids_matching_independent_enumeration():
  grids = sudoku.all_solution_grids()
  assert grids.shape == (288, 16) and grids.dtype == np.int8
  assert not grids.flags.writeable
  as_strings = ["".join(map(str, g)) for g in grids.tolist()]
  assert len(set(as_strings)) == 288
  assert all(_plain_valid(g) for g in grids.tolist())
  assert len(INDEPENDENT_GRIDS) == 288
  assert set(as_strings) == set(INDEPENDENT_GRIDS)


def test_count_solutions_and_is_valid_solution():
  grid = INDEPENDENT_GRIDS[17]
  assert sudoku.count_solutions(grid) == 1
  assert sudoku.count_solutions("0" * 16) == 288
  assert sudoku.count_solutions("11" + "0" * 14) == 0  # two 1s in a row
  for puzzle in ("1" + "0" * 15, "1200" + "0" * 12, "1000010000100001"):
    assert sudoku.count_solutions(puzzle) == len(_independent_solutions(puzzle))
  assert sudoku.is_valid_solution("0" * 16, grid)
  assert sudoku.is_valid_solution(grid[:5] + "0" * 11, grid)
  other = next(g for g in INDEPENDENT_GRIDS if g[0] != grid[0])
  assert not sudoku.is_valid_solution(grid[:1] + "0" * 15, other)  # changes a given
  assert not sudoku.is_valid_solution("0" * 16, "1" * 16)
  for junk in ("", grid[:15], grid + "1", "abcd" * 4, None):
    assert not sudoku.is_valid_solution("0" * 16, junk)
  with pytest.raises(ValueError, match="16 digits"):
    sudoku.count_solutions("123")
  with pytest.raises(ValueError, match="16 digits"):
    sudoku.is_valid_solution("5" * 16, grid)


def test_max_unique_blanks_is_12_by_independent_check():
  assert sudoku.max_unique_blanks() == 12
  grids = np.array([[int(c) for c in g] for g in INDEPENDENT_GRIDS])
  keys_weight = 5 ** np.arange(16)

  def some_unique(num_givens: int) -> bool:
    for cells in itertools.combinations(range(16), num_givens):
      cells = list(cells)
      keys = grids[:, cells] @ keys_weight[:num_givens]
      _, counts = np.unique(keys, return_counts=True)
      if np.any(counts == 1):
        return True
    return False

  assert not some_unique(3)  # 13 blanks: never a unique solution.
  assert some_unique(4)      # 12 blanks: possible.


# ----------------------------------------------------------------------------- generator


@pytest.mark.parametrize("num_blanks", [4, 6, 8, 10])
def test_generated_puzzles_unique_by_brute_force(num_blanks):
  puzzles = sudoku.generate_puzzles(3, num_blanks, seed=num_blanks)
  for puzzle, solution in puzzles:
    assert puzzle.count("0") == num_blanks
    assert _plain_valid(solution)
    assert all(p in ("0", s) for p, s in zip(puzzle, solution))
    assert _brute_force_count(puzzle) == 1
    assert _independent_solutions(puzzle) == [solution]


def test_generated_puzzles_12_blanks_unique():
  puzzles = sudoku.generate_puzzles(20, 12, seed=3)
  for puzzle, solution in puzzles:
    assert puzzle.count("0") == 12
    assert _independent_solutions(puzzle) == [solution]


def test_brute_force_oracle_detects_multiple_solutions():
  # Sanity check of the oracle itself: it agrees with the independent enumeration, and counts
  # more than one filling where there are several.
  puzzle = "0" * 8 + INDEPENDENT_GRIDS[0][8:]
  n = _brute_force_count(puzzle)
  assert n == len(_independent_solutions(puzzle)) >= 2
  assert _brute_force_count("0" * 4 + INDEPENDENT_GRIDS[5][4:]) == 1
  assert _brute_force_count("11" + "0" * 8 + INDEPENDENT_GRIDS[0][10:]) == 0


def test_generator_deterministic_distinct_and_excludes():
  a = sudoku.generate_puzzles(300, 8, seed=11)
  b = sudoku.generate_puzzles(300, 8, seed=11)
  c = sudoku.generate_puzzles(300, 8, seed=12)
  assert a == b
  assert a != c
  assert len({p for p, _ in a}) == 300
  assert all(sudoku.count_solutions(p) == 1 for p, _ in a)
  exclude = frozenset(p for p, _ in a[:150])
  d = sudoku.generate_puzzles(300, 8, seed=11, exclude=exclude)
  assert not exclude & {p for p, _ in d}
  e = sudoku.generate_puzzles(50, 8, seed=11, exclude=[p for p, _ in a[:20]])  # any collection
  assert not {p for p, _ in a[:20]} & {p for p, _ in e}
  assert sudoku.generate_puzzles(0, 8, seed=0) == []


def test_generator_blank_range():
  puzzles = sudoku.generate_puzzles(400, (4, 12), seed=5)
  counts = {p.count("0") for p, _ in puzzles}
  assert counts <= set(range(4, 13))
  assert {4, 12} <= counts
  assert all(sudoku.count_solutions(p) == 1 for p, _ in puzzles)
  assert {p.count("0") for p, _ in sudoku.generate_puzzles(20, [7, 7], seed=5)} == {7}


@pytest.mark.parametrize("bad", [13, 16, 0, -1, (5, 13), (9, 8), (8,), "8", 8.0, True, None])
def test_generator_rejects_bad_num_blanks(bad):
  with pytest.raises(ConfigError, match="task.num_blanks"):
    sudoku.generate_puzzles(1, bad, seed=0)
  with pytest.raises(ConfigError, match="task.num_blanks"):
    sudoku.Sudoku4x4Task(data_dir=None, num_blanks=bad)


def test_generator_exhaustion_names_field():
  with pytest.raises(ValueError, match="task.num_blanks"):
    sudoku.generate_puzzles(10, 12, seed=0, max_consecutive_failures=1)
  # Excluding every 1-blank puzzle of every grid leaves nothing to generate.
  everything = {g[:i] + "0" + g[i + 1:] for g in INDEPENDENT_GRIDS for i in range(16)}
  with pytest.raises(ValueError, match="could only generate 0 of 1"):
    sudoku.generate_puzzles(1, 1, seed=0, exclude=everything, max_consecutive_failures=2000)


# ----------------------------------------------------------------------------- graders


def _ex(puzzle: str, solution: str) -> Example:
  return Example(prompt=puzzle, target=solution, meta={"puzzle": puzzle, "solution": solution})


def test_reward_partial_and_parsing():
  task = sudoku.Sudoku4x4Task(data_dir=None)
  puzzle, solution = sudoku.generate_puzzles(1, 8, seed=1)[0]
  blanks = [i for i, c in enumerate(puzzle) if c == "0"]
  one_wrong = list(solution)
  one_wrong[blanks[0]] = "1234"[("1234".index(solution[blanks[0]]) + 1) % 4]  # a different digit
  one_wrong = "".join(one_wrong)
  given_wrong = list(solution)
  given_wrong[next(i for i, c in enumerate(puzzle) if c != "0")] = "x"
  completions = [
      solution, "  \n\t" + solution + "<junk after>", one_wrong, "".join(given_wrong),
      solution[:blanks[3]], puzzle,
  ]
  r = task.reward(completions, [_ex(puzzle, solution)] * len(completions))
  assert r.dtype == np.float32 and r.shape == (6,)
  expected = [1.0, 1.0, 7 / 8, 1.0, 3 / 8, 0.0]
  np.testing.assert_allclose(r, np.asarray(expected, np.float32), rtol=0, atol=0)
  m = task.metrics(completions, [_ex(puzzle, solution)] * len(completions))
  assert m["num_examples"] == 6
  assert m["strict_solved"] == pytest.approx(2 / 6)
  assert m["exact_match"] == pytest.approx(2 / 6)
  assert m["cell_accuracy"] == pytest.approx(np.mean(np.asarray(expected, np.float32)))


def test_garbage_completions_score_zero_and_never_raise():
  task = sudoku.Sudoku4x4Task(data_dir=None)
  puzzle, solution = sudoku.generate_puzzles(1, 8, seed=2)[0]
  garbage = ["", "   ", "\n\t", "hello world, no digits here", "\ufffd" * 30, "0" * 16, "5" * 40,
             "-" * 3, "\x00" * 16, "🧩" * 20]
  examples = [_ex(puzzle, solution)] * len(garbage)
  r = task.reward(garbage, examples)
  assert r.tolist() == [0.0] * len(garbage)
  m = task.metrics(garbage, examples)
  assert m == {"strict_solved": 0.0, "cell_accuracy": 0.0, "exact_match": 0.0,
               "grader_bound_hits": 0.0, "num_examples": float(len(garbage))}
  assert task.metrics([], [])["num_examples"] == 0
  assert task.reward([], []).shape == (0,)
  with pytest.raises(ValueError, match="completions"):
    task.reward(["x"], [])


# ----------------------------------------------------------------------------- d1 data


def test_d1_stored_solutions_score_one():
  rows = _require_d1()
  assert len(rows) == 500
  task = sudoku.Sudoku4x4Task(data_dir=str(D1_SUDOKU.parents[1]))
  examples, source = task.eval_examples()
  assert "d1" in source and str(D1_SUDOKU) in source
  assert [(e.meta["puzzle"], e.meta["solution"]) for e in examples] == rows
  assert all(e.prompt == p and e.target == s for e, (p, s) in zip(examples, rows))
  solutions = [s for _, s in rows]
  r = task.reward(solutions, examples)
  assert r.tolist() == [1.0] * 500
  assert task.metrics(solutions, examples) == {
      "strict_solved": 1.0, "cell_accuracy": 1.0, "exact_match": 1.0, "grader_bound_hits": 0.0,
      "num_examples": 500.0}


def test_d1_blanks_and_unique_count():
  rows = _require_d1()
  assert all(p.count("0") == 8 for p, _ in rows)
  independent = [len(_independent_solutions(p)) for p, _ in rows]
  assert sum(n == 1 for n in independent) == 376
  assert [sudoku.count_solutions(p) for p, _ in rows] == independent
  assert all(s in _independent_solutions(p) for p, s in rows)


def test_d1_alternative_solution_is_strict_but_not_exact():
  rows = _require_d1()
  task = sudoku.Sudoku4x4Task(data_dir=None)
  puzzle, solution = next((p, s) for p, s in rows if len(_independent_solutions(p)) > 1)
  alternative = next(g for g in _independent_solutions(puzzle) if g != solution)
  ex = [_ex(puzzle, solution)]
  m = task.metrics([alternative], ex)
  assert m["strict_solved"] == 1.0
  assert m["exact_match"] == 0.0
  blanks = [i for i, c in enumerate(puzzle) if c == "0"]
  expected = sum(alternative[i] == solution[i] for i in blanks) / len(blanks)
  assert expected < 1.0
  assert task.reward([alternative], ex)[0] == np.float32(expected)
  assert m["cell_accuracy"] == pytest.approx(expected)


def test_train_examples_exclude_d1_eval():
  _require_d1()
  task = sudoku.Sudoku4x4Task(data_dir=str(D1_SUDOKU.parents[1]))
  eval_puzzles = {e.meta["puzzle"] for e in task.eval_examples()[0]}
  train = task.train_examples(3000, seed=0)
  assert len(train) == 3000
  assert not eval_puzzles & {e.meta["puzzle"] for e in train}
  assert train == task.train_examples(3000, seed=0)


# ----------------------------------------------------------------------------- task / data sources


def test_fallback_to_generated_eval_set(monkeypatch, tmp_path):
  monkeypatch.setenv("DACA_DATA_DIR", str(tmp_path))  # a data dir without sudoku/d1_test.csv
  task = sudoku.Sudoku4x4Task(data_dir="", eval_size=40, seed=7)
  examples, source = task.eval_examples()
  assert "GENERATED" in source and "not found" in source and "d1_test.csv" in source
  assert len(examples) == 40
  assert len({e.meta["puzzle"] for e in examples}) == 40
  assert all(sudoku.count_solutions(e.meta["puzzle"]) == 1 for e in examples)
  assert all(e.meta["puzzle"].count("0") == 8 for e in examples)
  again = sudoku.Sudoku4x4Task(data_dir=str(tmp_path), eval_size=40, seed=7).eval_examples()[0]
  assert again == examples
  no_dir = sudoku.Sudoku4x4Task(data_dir=None, eval_size=40, seed=7).eval_examples()
  assert no_dir[0] == examples and "GENERATED" in no_dir[1]
  train = task.train_examples(500, seed=7)  # same seed as eval: overlap must still be excluded
  assert not {e.meta["puzzle"] for e in examples} & {e.meta["puzzle"] for e in train}


def test_eval_from_data_dir_and_explicit_path(tmp_path):
  rows = sudoku.generate_puzzles(5, 6, seed=9)
  (tmp_path / "sudoku").mkdir()
  text = "Puzzle,Solution\n" + "".join(f"{p},{s}\n" for p, s in rows)
  (tmp_path / "sudoku" / "d1_test.csv").write_text(text)
  examples, source = sudoku.Sudoku4x4Task(data_dir=str(tmp_path)).eval_examples()
  assert [(e.prompt, e.target) for e in examples] == rows
  assert "GENERATED" not in source
  other = tmp_path / "mine.csv"
  other.write_text("Puzzle,Solution\n" + "".join(f"{p},{s}\n" for p, s in rows[:2]))
  task = sudoku.Sudoku4x4Task(data_dir=str(tmp_path), eval_path=str(other))
  examples, source = task.eval_examples()
  assert [(e.prompt, e.target) for e in examples] == rows[:2]
  assert str(other) in source


def test_eval_file_with_invalid_solution_is_rejected(tmp_path):
  bad = tmp_path / "bad.csv"
  # Digits in range, givens kept, but the solution grid is not a valid sudoku.
  bad.write_text("Puzzle,Solution\n0000000000000000,1111222233334444\n")
  with pytest.raises(ValueError, match="not a valid solution"):
    sudoku.Sudoku4x4Task(eval_path=str(bad)).eval_examples()


def test_missing_paths_name_config_fields(tmp_path):
  missing = tmp_path / "no_such.csv"
  with pytest.raises(FileNotFoundError, match="task.eval_path") as err:
    sudoku.Sudoku4x4Task(data_dir=None, eval_path=str(missing))
  assert str(missing) in str(err.value)
  with pytest.raises(FileNotFoundError, match="data.data_dir"):
    sudoku.Sudoku4x4Task(data_dir=str(tmp_path / "no_dir"))
  with pytest.raises(ConfigError, match="task.eval_size"):
    sudoku.Sudoku4x4Task(data_dir=None, eval_size=0)


def test_make_task_and_registry():
  task = make_task("sudoku4x4", data_dir=None, eval_size=10)
  assert isinstance(task, sudoku.Sudoku4x4Task) and isinstance(task, base.Task)
  assert task.name == "sudoku4x4"
  assert "sudoku4x4" in base.TASKS
  with pytest.raises(ConfigError, match="task.name") as err:
    make_task("sudoku9x9")
  assert "sudoku4x4" in str(err.value)


def test_encode_prompts_and_targets():
  task = sudoku.Sudoku4x4Task(data_dir=None)
  tok = task.tokenizer
  assert (task.prompt_len, task.min_gen_length) == (17, 17)
  rows = sudoku.generate_puzzles(3, 8, seed=4)
  examples = [_ex(p, s) for p, s in rows]
  prompts = task.encode_prompts(examples)
  assert prompts.dtype == np.int32 and prompts.shape == (3, 17)
  for row, (p, _) in zip(prompts, rows):
    assert row[0] == tok.bos_id
    assert row[1:].tolist() == [ord(c) for c in p]
  targets = task.encode_targets(examples, 17)
  assert targets.dtype == np.int32 and targets.shape == (3, 17)
  for row, (_, s) in zip(targets, rows):
    assert row.tolist() == [ord(c) for c in s] + [tok.eos_id]
    assert tok.decode(row) == s
  long = task.encode_targets(examples, 20)
  assert long[:, 16:].tolist() == [[tok.eos_id] * 4] * 3
  with pytest.raises(ValueError, match="rollout.gen_length") as err:
    task.encode_targets(examples, 16)
  assert "16" in str(err.value) and "17" in str(err.value)
  with pytest.raises(ValueError, match="rollout.gen_length"):
    task.encode_targets(examples, 0)
  assert task.encode_targets([], 17).shape == (0, 17)
  assert task.encode_prompts([]).shape == (0, 17)


def test_encode_prompts_left_pads_and_rejects_long_prompts():
  task = sudoku.Sudoku4x4Task(data_dir=None)
  tok = task.tokenizer
  short = Example(prompt="12é", target="", meta={})
  row = task.encode_prompts([short])[0]
  assert row.tolist() == [tok.pad_id] * 12 + [tok.bos_id, ord("1"), ord("2"), 0xC3, 0xA9]
  assert task.encode_targets([short], 3).tolist() == [[tok.eos_id] * 3]
  too_long = Example(prompt="0" * 17, target="", meta={})
  with pytest.raises(ValueError, match="example 1") as err:
    task.encode_prompts([short, too_long])
  assert "0" * 17 in str(err.value) and "prompt_len=17" in str(err.value)


# ------------------------------------------------------------------ chat style (d1's protocol)
PUZZLE, SOLUTION = "3102200002100320", "3142243142131324"  # d1's first test puzzle
_BLANKS = [i for i, c in enumerate(PUZZLE) if c == "0"]


def _cells(answer: str) -> float:
  """d1's cell score of an answer string, written out: pad/truncate to 16, compare blank cells."""
  padded = (answer + "0" * 16)[:16]
  return sum(padded[i] == SOLUTION[i] for i in _BLANKS) / len(_BLANKS)


def test_chat_prompt_is_d1s_sudoku_prompt():
  task = make_task("sudoku4x4", data_dir=None, eval_size=3, prompt_style="chat")
  ex = task.eval_examples()[0][0]
  assert ex.prompt.startswith("<|start_header_id|>user<|end_header_id|>\n\nPlease solve the following "
                              "4x4 Sudoku puzzle.")
  assert "Important: Your solution must be a COMPLETE 16-character string" in ex.prompt
  assert "[16-character solution string with no spaces or separators]\n</answer>" in ex.prompt
  assert ex.prompt.endswith(f"Solve the following Sudoku puzzle: {ex.meta['puzzle']}<|eot_id|>"
                            "<|start_header_id|>assistant<|end_header_id|>\n\n<reasoning>")
  assert ex.target.endswith(f"</reasoning>\n<answer>\n{ex.meta['solution']}\n</answer>")
  assert task.encode_prompts([ex]).shape == (1, task.prompt_len)
  targets = task.encode_targets([ex], task.min_gen_length)
  assert task.reward(task.decode_completions(targets), [ex]).tolist() == [1.0]
  with pytest.raises(ConfigError, match="task.options.prompt_style"):
    make_task("sudoku4x4", data_dir=None, prompt_style="xml")


@pytest.mark.parametrize("completion,answer", [
    (f"\nfill the blanks\n</reasoning>\n<answer>\n{SOLUTION}\n</answer>", SOLUTION),
    # The chance-level reading of the plain grader ("To solve this 4x") is gone:
    ("To solve this 4x4 puzzle I look at each row.", ""),
    (f"<answer>\n{SOLUTION[:4]} {SOLUTION[4:8]}\n{SOLUTION[8:12]} {SOLUTION[12:]}\n</answer>", SOLUTION),
    (f"<answer>\n```\n{SOLUTION[:8]}\n{SOLUTION[8:]}\n```\n</answer>", SOLUTION),  # pattern 1
    (f"<answer>{SOLUTION[:10]}</answer>", SOLUTION[:10]),  # short: padded with 0 for the cells
    (f"<answer>{SOLUTION}1234</answer>", SOLUTION + "1234"),  # long: truncated for the cells
    (f"<answer>[{SOLUTION}]</answer>", f"[{SOLUTION}]"),  # d1 keeps every non-space character
    (f"<answer>\n{SOLUTION}<|eot_id|>junk", SOLUTION),  # the end-of-text marker closes the span
    (f"<answer>\n\n</answer>\n{SOLUTION}", SOLUTION),  # pattern 3: the text after </answer>
    (f"my grid: {SOLUTION} done", SOLUTION),  # pattern 5: a free-standing 16-digit number
    (f"x{SOLUTION}y", ""),  # ... not inside a word
    (f"<answer>1</answer><answer>{SOLUTION}</answer>", "1"),  # the FIRST span (d1's re.search)
])
def test_chat_answers_are_read_with_d1s_parser(completion, answer):
  assert sudoku.extract_chat_answer(completion) == answer
  task = make_task("sudoku4x4", data_dir=None, eval_size=3, prompt_style="chat")
  ex = Example(prompt="", target="", meta={"puzzle": PUZZLE, "solution": SOLUTION})
  assert task.reward([completion], [ex])[0] == pytest.approx(_cells(answer) if answer else 0.0)


def test_chat_metrics_cell_accuracy_is_d1s_cell_ratio():
  task = make_task("sudoku4x4", data_dir=None, eval_size=3, prompt_style="chat")
  ex = [Example(prompt="", target="", meta={"puzzle": PUZZLE, "solution": SOLUTION}),
        Example(prompt="", target="", meta={"puzzle": "3142243142131320", "solution": SOLUTION})]
  completions = [f"<answer>{SOLUTION[:12]}</answer>", "<answer>0000</answer>"]
  m = task.metrics(completions, ex)
  # First puzzle: blanks 2, 5, 6, 7, 8, 11 right, 12 and 15 padded with "0"; the second puzzle's one
  # blank wrong: (6 + 0) / (8 + 1) cells, not the mean of the per-puzzle fractions (3 / 8).
  assert m["cell_accuracy"] == pytest.approx(6 / 9)
  assert m["strict_solved"] == 0.0 and m["exact_match"] == 0.0 and m["grader_bound_hits"] == 0.0
