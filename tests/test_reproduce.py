"""The reproduction grid's bookkeeping: arms, per-cell configs, Student-t intervals, summaries."""
import math

import numpy as np
import pytest

from configs import sudoku_tiny
from daca_jax import reproduce as rp
from daca_jax.types import train_config_from_dict


def test_arms_map_to_credit_and_likelihood():
  assert rp.arm_methods("diffu_grpo", "base") == ("uniform", "mean_field")
  assert rp.arm_methods("gdpo", "base") == ("uniform", "elbo")
  assert rp.arm_methods("gdpo", "+DPS") == ("dps", "elbo")
  assert rp.arm_methods("wd1", "+SML") == ("uniform", "stratified")
  assert rp.arm_methods("wd1", "+DACA") == ("dps", "stratified")
  assert rp.arm_methods("diffu_grpo", "+DTCA") == ("dtca", "mean_field")
  assert rp.arm_methods("gdpo", "+DelTA") == ("delta", "elbo")
  assert rp.arm_methods("rldf", "base") == ("uniform", "rldf")
  with pytest.raises(ValueError, match="arm"):
    rp.arm_methods("wd1", "+XYZ")


def test_cell_config_changes_only_method_and_seed():
  cfg = train_config_from_dict(sudoku_tiny.get_config("smoke"))
  cell = rp.Cell("sudoku4x4", "gdpo", "+DACA", 2)
  c = rp.cell_config(cfg, cell)
  assert (c.seed, c.rl.objective, c.rl.credit, c.rl.likelihood) == (2, "gdpo", "dps", "stratified")
  assert c.rl.steps == cfg.rl.steps and c.model == cfg.model and c.sft == cfg.sft
  rldf = rp.cell_config(cfg, rp.Cell("sudoku4x4", "rldf", "+DPS", 0))
  assert (rldf.rl.objective, rldf.rl.likelihood, rldf.rl.credit, rldf.rl.beta) == ("rldf", "rldf", "dps", 0.01)
  cells = rp.grid(["sudoku4x4"], ["diffu_grpo", "wd1"], [0, 1])
  assert len(cells) == 16 and len({c.key for c in cells}) == 16


def test_mean_ci95_student_t():
  v = [0.2, 0.4, 0.3]
  m, h = rp.mean_ci95(v)
  assert m == pytest.approx(0.3)
  assert h == pytest.approx(4.303 * np.std(v, ddof=1) / math.sqrt(3), rel=1e-6)
  assert math.isnan(rp.mean_ci95([0.5])[1])


def test_summarize_pairs_with_the_warm_start(tmp_path):
  cells = rp.grid(["t"], ["diffu_grpo"], [0, 1], arms=("base", "+DACA"))
  before = {0: 0.3, 1: 0.5}
  after = {("base", 0): 0.35, ("base", 1): 0.45, ("+DACA", 0): 0.4, ("+DACA", 1): 0.6}
  results = {c.key: {"eval_before": {"strict_solved": before[c.seed]},
                     "eval_after": {"strict_solved": after[(c.arm, c.seed)]}} for c in cells}
  rows = {r["arm"]: r for r in rp.summarize(cells, results, metric="strict_solved")}
  assert rp.primary_metric("sudoku4x4") == "strict_solved"
  assert rows["+DACA"]["mean"] == pytest.approx(0.5) and rows["+DACA"]["delta_mean"] == pytest.approx(0.1)
  assert rows["base"]["delta_mean"] == pytest.approx(0.0) and rows["base"]["values"] == [0.35, 0.45]
  # paired with the base arm of the same seed: (0.4 - 0.35, 0.6 - 0.45) = (0.05, 0.15)
  assert rows["+DACA"]["vs_base_mean"] == pytest.approx(0.1)
  assert rows["+DACA"]["vs_base_ci95"] == pytest.approx(12.706 * np.std([0.05, 0.15], ddof=1) / math.sqrt(2))
  assert "vs_base_mean" not in rows["base"]
  md = rp.markdown(list(rows.values()))
  assert "+DACA" in md and md.count("\n") == 3 and "+0.100 ±" in md and "separates" not in md
  rp.plot(list(rows.values()), tmp_path / "g.png")
  assert (tmp_path / "g.png").stat().st_size > 1000


def test_summarize_uses_each_tasks_primary_metric():
  cells = rp.grid(["sudoku4x4", "countdown"], ["diffu_grpo"], [0, 1], arms=("base",))
  results = {c.key: ({"eval_before": {"strict_solved": 0.2}, "eval_after": {"strict_solved": 0.3}}
                     if c.task == "sudoku4x4" else
                     {"eval_before": {"accuracy": 0.1}, "eval_after": {"accuracy": 0.15}}) for c in cells}
  rows = {r["task"]: r for r in rp.summarize(cells, results)}
  assert rows["sudoku4x4"]["metric"] == "strict_solved" and rows["countdown"]["metric"] == "accuracy"
  assert rows["countdown"]["mean"] == pytest.approx(0.15) and rows["sudoku4x4"]["delta_mean"] == pytest.approx(0.1)
