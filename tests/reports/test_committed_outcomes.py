"""The committed studies' numbers recomputed from their committed per-example outcomes: every run of every
variants file under docs/results whose outcomes are copied beside it scores, on each evaluated split, the
mean of its outcomes' primary metric; and the collapse table's cells (docs/results.md) follow from them."""
from __future__ import annotations

import gzip
import json
import pathlib

import pytest

from daca_jax.reports.variants import read_variants, variants_table

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "results"
WITH_OUTCOMES = sorted(p for p in RESULTS.glob("*.json")
                       if any("outcomes" in r for r in json.loads(p.read_text()).get("runs", [])))


def _mean(path: pathlib.Path, metric: str) -> float:
  with gzip.open(path, "rt") as f:
    rows = [json.loads(line) for line in f]
  return sum(r[metric] for r in rows) / len(rows)


def test_some_committed_studies_carry_outcomes():
  assert {p.name for p in WITH_OUTCOMES} >= {"collapse_study.json", "credit_headroom_b8.json"}


@pytest.mark.parametrize("path", WITH_OUTCOMES, ids=lambda p: p.name)
def test_each_runs_score_is_the_mean_of_its_outcomes(path):
  runs = json.loads(path.read_text())["runs"]
  checked = 0
  for run in runs:
    for split, rel in run.get("outcomes", {}).items():
      assert run[split] is not None, (run["arm"], split)
      assert _mean(RESULTS / rel, "strict_solved") == pytest.approx(run[split], abs=5e-4), (run["arm"], split)
      checked += 1
  assert checked >= len(runs)


def test_the_collapse_tables_cells_follow_from_the_outcomes():
  """docs/results.md's collapse table: the test change of 'map (grid)' on seed 2, recomputed."""
  path = RESULTS / "collapse_study.json"
  run = next(r for r in json.loads(path.read_text())["runs"] if r["arm"] == "map (grid)")
  after = _mean(RESULTS / run["outcomes"]["test_after"], "strict_solved")
  change = f"{100 * (after - run['test_before']):+.1f}"
  row = next(line for line in variants_table(read_variants(str(path), "runs"), "map (grid)").splitlines()
             if line.startswith("| map (grid) |"))
  assert row.split(" | ")[2] == change
