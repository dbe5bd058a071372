"""A grid's finished main jobs as a variants file (daca_jax.reports.variant_runs, reproduce.py --variants):
the runs' scores, curves and per-example outcomes reach experiments/variants_table.py's bootstrap."""
import gzip
import json
import re
import pathlib
import subprocess
import sys

import pytest

from daca_jax.errors import DataError
from daca_jax.reports.variant_runs import variants_run, write_variants
from daca_jax.reports.variants import read_variants, seed_table, variants_table

REPO = pathlib.Path(__file__).resolve().parents[2]


def _job(workdir, val, test, before=0.2):
  """A finished main job's files: ``val`` / ``test`` are the per-puzzle strict_solved after RL."""
  workdir.mkdir(parents=True)
  for name, solved in (("val_step4", val), ("eval_after", test)):
    (workdir / f"{name}.outcomes.jsonl").write_text("".join(
        json.dumps({"index": i, "key": f"k{i}", "strict_solved": float(x)}) + "\n" for i, x in enumerate(solved)))
  mean = lambda xs: sum(xs) / len(xs)
  (workdir / "results.json").write_text(json.dumps({
      "eval_before": {"strict_solved": before}, "eval_after": {"strict_solved": mean(test)},
      "val_before": {"strict_solved": before}, "val_after": {"strict_solved": mean(val)},
      "reward_trend": {"first_mean": 0.3, "last_mean": 0.4, "window": 2, "iterations": 4},
      "outcomes": {"eval_after": "eval_after.outcomes.jsonl", "val_after": "val_step4.outcomes.jsonl"}}))
  (workdir / "metrics.jsonl").write_text(json.dumps({"step": 2, "val/strict_solved": 0.1}) + "\n"
                                         + json.dumps({"step": 4, "val/strict_solved": mean(val)}) + "\n")


def test_a_finished_job_becomes_a_run_whose_outcomes_feed_the_bootstrap(tmp_path):
  # The arm solves puzzle k0 where the reference does not, from both warm starts: D = [[1, 0], [1, 0]]
  # on validation -> +50 [+0, +100] (tests/reports/test_variants.py's hand case).
  jobs = {("base", 0): ([0, 1], [0, 0]), ("base", 1): ([0, 0], [1, 0]),
          ("new", 0): ([1, 1], [0, 0]), ("new", 1): ([1, 0], [1, 1])}
  out = tmp_path / "results" / "study.json"
  runs = []
  for (arm, seed), (val, test) in jobs.items():
    _job(tmp_path / "grid" / arm / str(seed), val, test)
    runs.append(variants_run(tmp_path / "grid" / arm / str(seed), arm=arm, seed=seed,
                             overrides=[("rl.credit", "uniform"), ("credit.drop_agreed", True)] if arm == "new" else [],
                             metric="strict_solved", folder=out.parent, outcomes_dir=out.parent / "study"))
  write_variants(out, {"runs": runs}, what="test")
  new0 = runs[2]
  assert new0["overrides"] == ["--config.rl.credit=uniform", "--config.credit.drop_agreed=true"]
  assert (new0["test_before"], new0["test_after"], new0["val_before"], new0["val_curve"], new0["val_after"]) == (
      0.2, 0.0, 0.2, [0.1, 1.0], 1.0)
  assert new0["reward_rise"] == pytest.approx(0.1)
  assert new0["outcomes"] == {"val_after": "study/new_seed0.val_after.outcomes.jsonl.gz",
                              "test_after": "study/new_seed0.test_after.outcomes.jsonl.gz"}
  packed = gzip.decompress((out.parent / new0["outcomes"]["val_after"]).read_bytes())
  assert packed == (tmp_path / "grid" / "new" / "0" / "val_step4.outcomes.jsonl").read_bytes()
  cells = variants_table(read_variants(out), reference="base", arms=["new"]).splitlines()[2].split(" | ")
  assert cells[8].startswith("+50.0 [+0.0, +100.0] (n=2×2, bootstrap; p ") and cells[8].endswith(") |")
  assert "(n=2×2, bootstrap; p " in cells[7]
  # Sealed: no test scores or test outcomes; the table and the seed table say so.
  sealed = variants_run(tmp_path / "grid" / "new" / "0", arm="new", seed=0, overrides=[], metric="strict_solved",
                        folder=out.parent, outcomes_dir=out.parent / "sealed", sealed_test=True)
  assert (sealed["test_before"], sealed["test_after"], list(sealed["outcomes"])) == (None, None, ["val_after"])
  assert not (out.parent / "sealed" / "new_seed0.test_after.outcomes.jsonl.gz").exists()
  row = variants_table([sealed], reference="new").splitlines()[2].split(" | ")
  assert row[2:4] == ["n/a", "n/a"] and row[4] == "+80.0"
  assert "| 0 | sealed | n/a | 0.200 → 1.000 |" in seed_table([sealed], "new")
  with pytest.raises(DataError, match="not a finished RL run"):
    (tmp_path / "grid" / "new" / "1" / "results.json").write_text(json.dumps({"eval_after": {}}))
    variants_run(tmp_path / "grid" / "new" / "1", arm="new", seed=1, overrides=[], metric="strict_solved",
                 folder=out.parent, outcomes_dir=out.parent / "study")


def test_reproduce_writes_the_variants_file_of_a_finished_grid(tmp_path):
  from daca_jax.reports.reproduce import Cell
  # D = [[1, 1], [1, 0]]: a replicate's mean is 1 - x·y (x, y: the shares of seed 11 and of k1 drawn),
  # 1, 3/4, 1/2, 0 w.p. 7/16, 4/16, 4/16, 1/16 -> [0, 1], mean 3/4.
  for arm, seed, val in (("base", 10, [0, 0]), ("DPS + SML", 10, [1, 1]), ("base", 11, [0, 0]),
                         ("DPS + SML", 11, [1, 0])):
    _job(tmp_path / "grid" / "cells" / Cell("sudoku4x4", "diffu_grpo", arm, seed).key, val, [0, 1])
  out = tmp_path / "v" / "credit.json"
  proc = subprocess.run([sys.executable, "experiments/reproduce.py", f"--workdir={tmp_path / 'grid'}", "--preset=credit",
                         "--study=configs/credit_protocol.py", "--arms=base,DPS + SML", "--seeds=10,11",
                         "--finished_only", f"--variants={out}", "--sealed_test"],
                        cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  data = json.loads(out.read_text())
  assert [(r["arm"], r["seed"]) for r in data["runs"]] == [("base", 10), ("DPS + SML", 10), ("base", 11),
                                                          ("DPS + SML", 11)]
  assert data["runs"][1]["overrides"] == ["--config.rl.credit=dps"] and data["runs"][1]["test_after"] is None
  assert "test set sealed" in data["what"]
  table = variants_table(read_variants(out), reference="base", arms=["DPS + SML"]).splitlines()[2]
  assert re.search(r"\| \+75\.0 \[\+0\.0, \+100\.0\] \(n=2×2, bootstrap; p [\d.]+, Holm [\d.]+\) \|$", table)
