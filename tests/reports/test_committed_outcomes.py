"""The committed studies' numbers recomputed from their committed per-example outcomes: every run of every
variants file under docs/results whose outcomes are copied beside it scores, on each evaluated split, the
mean of its outcomes' primary metric; and the collapse table's cells (docs/results.md) follow from them."""
from __future__ import annotations

import gzip
import json
import pathlib
from typing import Callable

import pytest

from daca_jax.reports.variants import METRICS, read_variants, variants_table

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "results"


def _lists(path: pathlib.Path) -> dict[str, list]:
  """The lists of runs of a variants file (``runs``: Sudoku, ``countdown_runs``), by key."""
  data = json.loads(path.read_text())
  return {k: v for k, v in data.items() if k in METRICS and isinstance(v, list)} if "runs" in data else {}


WITH_OUTCOMES = sorted(p for p in RESULTS.glob("*.json")
                       if any("outcomes" in r for runs in _lists(p).values() for r in runs))


def _mean(path: pathlib.Path, metric: str) -> float:
  with gzip.open(path, "rt") as f:
    rows = [json.loads(line) for line in f]
  return sum(r[metric] for r in rows) / len(rows)


def test_some_committed_studies_carry_outcomes():
  assert {p.name for p in WITH_OUTCOMES} >= {"collapse_study.json", "credit_headroom_b8.json"}


@pytest.mark.parametrize("path", WITH_OUTCOMES, ids=lambda p: p.name)
def test_each_runs_score_is_the_mean_of_its_outcomes(path):
  for key, runs in _lists(path).items():
    checked = 0
    for run in runs:
      for split, rel in run.get("outcomes", {}).items():
        assert run[split] is not None, (run["arm"], split)
        assert _mean(RESULTS / rel, METRICS[key]) == pytest.approx(run[split], abs=5e-4), (key, run["arm"], split)
        checked += 1
    assert checked >= len(runs), key


def test_the_collapse_tables_cells_follow_from_the_outcomes():
  """docs/results.md's collapse table: the test change of 'map (grid)' on seed 2, recomputed."""
  path = RESULTS / "collapse_study.json"
  run = next(r for r in json.loads(path.read_text())["runs"] if r["arm"] == "map (grid)")
  after = _mean(RESULTS / run["outcomes"]["test_after"], "strict_solved")
  change = f"{100 * (after - run['test_before']):+.1f}"
  row = next(line for line in variants_table(read_variants(str(path), "runs"), "map (grid)").splitlines()
             if line.startswith("| map (grid) |"))
  assert row.split(" | ")[2] == change


def _countdown_runs() -> dict[tuple[str, int], dict]:
  return {(r["arm"], r["seed"]): r
          for r in read_variants(str(RESULTS / "sota_countdown_runs.json"), "countdown_runs")}


def test_the_countdown_grids_cells_follow_from_the_outcomes():
  """The Countdown grid's table (``--table_from=docs/results/sota_countdown.json``): MAP's score after RL and its
  paired difference with d1's base, recomputed from the committed per-example outcomes."""
  runs = _countdown_runs()
  grid = json.loads((RESULTS / "sota_countdown.json").read_text())
  row = next(r for r in grid["rows"] if r["arm"] == "map")
  after = {s: _mean(RESULTS / runs[("map", s)]["outcomes"]["test_after"], "accuracy") for s in row["seeds"]}
  base = {s: _mean(RESULTS / runs[("base", s)]["outcomes"]["test_after"], "accuracy") for s in row["seeds"]}
  assert row["seeds"] == [0, 1, 2, 3]
  assert row["mean"] == pytest.approx(sum(after.values()) / 4, abs=1e-9)
  assert row["vs_base_mean"] == pytest.approx(sum(after[s] - base[s] for s in after) / 4, abs=1e-9)


def test_the_countdown_solved_set_counts_in_the_results_follow_from_the_outcomes():
  """docs/results.md's counts of the items on which MAP's, BGPO's and d1's base's solved sets differ."""
  runs = _countdown_runs()

  def solved(arm: str, seed: int) -> set[str]:
    return {k for k, v in runs[(arm, seed)]["per_example"]["test"].items() if v > 0}

  diff = lambda a, b, s: len(solved(a, s) ^ solved(b, s))
  text = (RESULTS.parent / "results.md").read_text()
  map_bgpo = [diff("map", "bgpo", s) for s in (0, 2, 3)]
  assert f"MAP's and BGPO's solved sets differ by {map_bgpo[0]}, {map_bgpo[1]} and {map_bgpo[2]} items" in text
  assert max(diff(a, "base", s) for a in ("map", "bgpo") for s in (0, 2, 3)) == 6  # "at most 6"
  assert solved("map", 3) == solved("bgpo", 3) == solved("base", 3) and len(solved("map", 3)) == 53
  seed1 = (diff("map", "bgpo", 1), diff("map", "base", 1), diff("bgpo", "base", 1))
  assert f"differ by {seed1[0]} items (MAP vs BGPO), {seed1[1]} (MAP vs d1's base) and {seed1[2]}" in text


def _sudoku_grid() -> tuple[dict[tuple[str, int], dict], list[dict], Callable[[str, int], float]]:
  """The Sudoku grid's rerun runs by (arm, seed), its table's rows, and a run's test score from its outcomes."""
  runs = {(r["arm"], r["seed"]): r for r in read_variants(str(RESULTS / "sota_grid_runs.json"), "runs")}
  rows = json.loads((RESULTS / "sota_grid.json").read_text())["rows"]
  return runs, rows, lambda arm, s: _mean(RESULTS / runs[(arm, s)]["outcomes"]["test_after"], "strict_solved")


def test_the_sudoku_grids_cells_follow_from_the_outcomes():
  """The strongest-bases grid's table (``--table_from=docs/results/sota_grid.json``): every cell's rerun (its
  outcomes committed in ``docs/results/sota_grid_runs.json``) scores the grid's value for its arm and seed,
  and d1 + SML's row (its score after RL, its change from the warm start and its paired difference with
  d1's base) is recomputed from the outcomes of its 4 seeds and of base's."""
  runs, table, score = _sudoku_grid()
  rows = {r["arm"]: r for r in table}
  assert len(runs) == sum(len(r["seeds"]) for r in table) == 42  # every cell of the table
  for arm, seed in runs:
    assert score(arm, seed) == pytest.approx(rows[arm]["values"][rows[arm]["seeds"].index(seed)], abs=1e-9)
  row = rows["d1 + SML"]
  assert row["seeds"] == [0, 1, 2, 3] and row["reference"] == "base"
  after = [score("d1 + SML", s) for s in row["seeds"]]
  assert row["mean"] == pytest.approx(sum(after) / 4, abs=1e-9)
  assert row["delta_mean"] == pytest.approx(sum(a - runs[("d1 + SML", s)]["test_before"]
                                                for a, s in zip(after, row["seeds"])) / 4, abs=1e-9)
  assert row["vs_base_mean"] == pytest.approx(sum(a - score("base", s) for a, s in zip(after, row["seeds"])) / 4,
                                              abs=1e-9)


def test_the_sudoku_grids_verdicts_follow_from_the_outcomes():
  """Every paired comparison of the strongest-bases grid's Sudoku table: the per-seed differences are
  recomputed from the committed outcomes of both arms, give the row's mean and interval, and their t-test
  p-values, Holm-adjusted over the table's family of comparisons, decide which rows the generated table
  marks "separates"."""
  from daca_jax.reports.paired import ALPHA, holm, mean_ci95, t_p_value
  from daca_jax.reports.reproduce import markdown

  _, rows, score = _sudoku_grid()
  paired = [r for r in rows if "vs_base_mean" in r]
  raw = []
  for row in paired:
    diffs = [score(row["arm"], s) - score(row["reference"], s) for s in row["seeds"]]
    mean, half = mean_ci95(diffs)
    assert (row["vs_base_mean"], row["vs_base_ci95"]) == pytest.approx((mean, half), abs=1e-9), row["arm"]
    raw.append(t_p_value(diffs))
  assert len(paired) == 10
  separates = {r["arm"] for r, q in zip(paired, holm(raw)) if q < ALPHA}
  table = {line.split(" | ")[3]: line for line in markdown(rows).splitlines()[2:]}
  assert {arm for arm, line in table.items() if "**separates**" in line} == separates
  assert separates == {"d1 + SML", "espo + SML"}  # what README.md and docs/results.md say separates
