"""The reproduction grid's bookkeeping: arms, per-cell configs, Student-t intervals, summaries."""
import math

import numpy as np
import pytest

from configs import sudoku_tiny
from daca_jax.reports import paired
from daca_jax.reports import reproduce as rp
from daca_jax.config.configure import train_config_from_dict


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


def test_study_arms_apply_their_overrides_and_nothing_else():
  from configs import credit_study

  cfg = rp.study_preset(rp.with_overrides(train_config_from_dict(sudoku_tiny.get_config()),
                                          [("task.num_val_examples", 40)]))
  assert (cfg.rl.steps, cfg.rl.prompts_per_step, cfg.rl.group_size, cfg.rl.eval_every) == (100, 32, 4, 20)
  # The main job's own recipe (down-sampling, std advantages, cosine decay, commit-order strata) does
  # not leak into the study: the preset fixes what its committed results were measured with.
  main = train_config_from_dict(sudoku_tiny.get_config())
  assert (main.rl.sample_group_size, main.rl.lr_schedule, main.likelihood.stratified.partition) == (
      8, "cosine", "commit_order")
  assert (cfg.rl.sample_group_size, cfg.rl.learning_rate, cfg.rl.lr_schedule, cfg.rl.advantage,
          cfg.rl.num_iterations, cfg.likelihood.stratified.partition) == (0, 1e-4, "constant", "", 1, "random")
  # The standard grid runs each task's own recipe; only the arm's methods change, and a task with a
  # validation split that the config never evaluates gets it every 25 iterations.
  std = rp.standard_preset(main)
  assert std == main.validate()
  no_curve = rp.with_overrides(main, [("rl.eval_every", 0)])
  assert rp.standard_preset(no_curve).rl.eval_every == 25 and rp.standard_preset(no_curve).rl.steps == main.rl.steps
  no_val = rp.with_overrides(main, [("rl.eval_every", 0), ("task.num_val_examples", 0)])
  assert rp.standard_preset(no_val).rl.eval_every == 0
  daca = rp.cell_config(std, rp.Cell("sudoku4x4", "wd1", "+DACA", 2))
  assert (daca.rl.objective, daca.rl.credit, daca.rl.likelihood, daca.seed) == ("wd1", "dps", "stratified", 2)
  assert (daca.rl.sample_group_size, daca.rl.lr_schedule, daca.likelihood.stratified.partition) == (
      8, "cosine", "commit_order")
  quick = rp.quick_preset(main)
  assert (quick.rl.group_size, quick.rl.sample_group_size, quick.likelihood.stratified.partition) == (8, 0, "random")
  cells = rp.study_grid(["sudoku4x4"], [1], credit_study.get_arms())
  assert len({c.key for c in cells}) == len(cells) and all(c.key.isascii() and " " not in c.key for c in cells)
  by_arm = {c.arm: rp.cell_config(cfg, c) for c in cells}
  base, pv = by_arm["base"], by_arm["position_value + traj4"]
  assert (base.rl.credit, base.rl.likelihood, base.seed) == ("uniform", "mean_field", 1)
  assert (pv.rl.credit, pv.rl.likelihood, pv.likelihood.trajectory.groups) == ("position_value", "trajectory", 4)
  assert pv.model == cfg.model and pv.sft == cfg.sft and pv.rl.steps == 100
  assert by_arm["dps + traj4 + drop_agreed"].credit.drop_agreed is True
  assert rp.Cell("t", "diffu_grpo", "+DPS", 0).key == "t/diffu_grpo/plus_DPS/seed0"  # grid folders unchanged


@pytest.mark.parametrize("path,value,match", [("rl.creditt", "uniform", "fields of rl"),
                                              ("rll.credit", "uniform", "sections"),
                                              ("rl.credit", "dpss", "rl.credit='dpss'")])
def test_with_overrides_names_a_bad_field(path, value, match):
  from daca_jax.errors import ConfigError

  with pytest.raises(ConfigError, match=match):
    rp.with_overrides(train_config_from_dict(sudoku_tiny.get_config("smoke")), [(path, value)])


def test_summary_reports_validation_change_and_reward_trend():
  cells = rp.study_grid(["t"], [0, 1], {"base": [("rl.credit", "uniform")], "pv": [("rl.credit", "position_value")]})
  results = {}
  for c in cells:
    up = 0.1 if c.arm == "pv" else 0.0
    results[c.key] = {"eval_before": {"m": 0.3}, "eval_after": {"m": 0.3 + up},
                      "val_before": {"m": 0.2}, "val_after": {"m": 0.2 + up + 0.01 * c.seed},
                      "reward_trend": {"first_mean": 0.5, "last_mean": 0.5 + up + c.seed / 100}}
  rows = {r["arm"]: r for r in rp.summarize(cells, results, metric="m")}
  assert rows["pv"]["val_delta_mean"] == pytest.approx(0.105)
  assert rows["pv"]["reward_rise"] == pytest.approx([0.1, 0.11])
  assert rows["pv"]["vs_base_mean"] == pytest.approx(0.1)
  md = rp.markdown(list(rows.values()))
  assert "validation change" in md and "+0.100 / +0.110" in md


def test_grid_verdicts_are_holm_adjusted_over_the_tables_comparisons():
  """Four arms whose raw intervals all exclude 0 (p 0.004 to 0.03): only those whose Holm-adjusted p-value
  stays below 0.05 over the table's family separate, and the header names the family."""
  arms = {"base": [("rl.objective", "diffu_grpo")]} | {f"a{i}": [("rl.beta", 0.01 * i)] for i in range(1, 5)}
  cells = rp.study_grid(["t"], [0, 1, 2, 3], arms, {})
  lifts = {"base": [0, 0, 0, 0], "a1": [10, 11, 12, 11], "a2": [4, 7, 5, 8], "a3": [2, 6, 3, 7],
           "a4": [3, 6, 2, 7]}
  results = {c.key: {"eval_before": {"m": 0.3}, "eval_after": {"m": 0.3 + 0.01 * lifts[c.arm][c.seed]}}
             for c in cells}
  rows = rp.summarize(cells, results, metric="m")
  raw = {r["arm"]: paired.t_p_value(lifts[r["arm"]]) for r in rows if r["arm"] != "base"}
  adjusted = dict(zip(raw, paired.holm(list(raw.values()))))
  assert all(p < 0.05 for p in raw.values()) and sum(q < 0.05 for q in adjusted.values()) == 2
  md = rp.markdown(rows)
  assert "Holm over 4 on t" in md
  for arm, q in adjusted.items():
    line = next(x for x in md.splitlines() if f"| {arm} |" in x)
    assert (f"Holm {q:.3f}" if q >= 0.001 else "Holm <0.001") in line and ("**separates**" in line) == (q < 0.05)


def test_study_arms_pair_with_their_named_reference_across_base_methods():
  """A study's arm is paired with the arm its references name (another base method's arm included,
  e.g. "spg + SML" with "spg"), by default with "base"; the table names a reference other than "base"."""
  from configs import sota_grid

  arms = {"base": [("rl.objective", "diffu_grpo")], "spg": [("rl.objective", "spg")],
          "spg + SML": [("rl.objective", "spg"), ("rl.likelihood", "stratified")]}
  cells = rp.study_grid(["t"], [0, 1, 2], arms, {"spg + SML": "spg"})
  after = {"base": [0.30, 0.40, 0.50], "spg": [0.20, 0.45, 0.30], "spg + SML": [0.25, 0.55, 0.30]}
  results = {c.key: {"eval_before": {"m": 0.3}, "eval_after": {"m": after[c.arm][c.seed]}} for c in cells}
  rows = {r["arm"]: r for r in rp.summarize(cells, results, metric="m")}
  assert "vs_base_mean" not in rows["base"]
  assert rows["spg"]["vs_base_mean"] == pytest.approx(np.mean([-0.10, 0.05, -0.20]))
  assert rows["spg + SML"]["vs_base_mean"] == pytest.approx(np.mean([0.05, 0.10, 0.0]))
  assert (rows["spg"]["reference"], rows["spg + SML"]["reference"]) == ("base", "spg")
  md = rp.markdown(list(rows.values()))
  assert "arm − reference (paired; Holm over 2 on t)" in md and "vs spg |" in md and "vs base |" in md
  # a grid of bases × arms keeps its header: every arm is paired with its own base method's "base"
  grid = rp.grid(["t"], ["diffu_grpo", "wd1"], [0, 1], arms=("base", "+SML"))
  assert {c.reference for c in grid if c.arm == "+SML"} == {("diffu_grpo", "base"), ("wd1", "base")}
  with pytest.raises(ValueError, match="not in the study"):
    rp.study_grid(["t"], [0], arms, {"d1 + SML": "base"})
  assert sota_grid.get_references() == ({f"{b} + SML": b for b in ("spg", "espo", "bgpo")}
                                        | {"map + DPS": "map", "map + drop_agreed": "map"})
  assert set(sota_grid.get_references().values()) <= set(sota_grid.get_arms())


def test_sota_studies_fit_each_task_and_change_only_what_they_name():
  """The credit arms are their base's method with only rl.credit changed; the Countdown study's bases
  take their Countdown presets' fields with MAP's segments fitted to its 8 steps; every arm is a valid
  config of its task (refused overrides would raise)."""
  from configs import countdown_tiny, sota_countdown, sota_grid
  from daca_jax.config.configure import validate

  arms = sota_grid.get_arms()
  for name, change in (("map + DPS", {"rl.credit": "dps"}), ("map + drop_agreed", {"credit.drop_agreed": True})):
    assert dict(arms[name]) == dict(arms["map"]) | change
  cd = sota_countdown.get_arms()
  assert list(cd) == ["base", "map", "bgpo"] and cd["base"] == arms["base"]
  assert dict(cd["map"])["likelihood.stepmerge.segments"] == 4  # 8 steps, 2 a segment (Sudoku: 5 of 10)
  assert dict(arms["map"])["likelihood.stepmerge.segments"] == 5
  for study, task in ((arms, sudoku_tiny), (cd, countdown_tiny)):
    cfg = rp.PRESETS["standard"](train_config_from_dict(task.get_config()))
    for overrides in study.values():
      done = validate(rp.with_overrides(cfg, overrides)).to_dict()
      for field, value in overrides:
        section, *rest = field.split(".")
        node = done[section]
        for part in rest:
          node = node[part]
        assert node == value, field


def test_reward_trend_windows(tmp_path):
  import json

  from daca_jax.run.metrics import reward_trend

  recs = [{"step": i + 1, "reward_mean": float(i)} for i in range(50)]
  t = reward_trend(recs)
  assert (t["first_mean"], t["last_mean"], t["window"], t["iterations"]) == (9.5, 39.5, 20, 50)
  assert reward_trend(recs[:6])["first_mean"] == reward_trend(recs[:6])["last_mean"] == 2.5
  assert reward_trend([{"step": 1, "kl": 0.1}]) == {}
  # A cached cell written before the field existed gets it from its metrics.jsonl.
  cell = rp.Cell("sudoku4x4", "diffu_grpo", "base", 0)
  cdir = tmp_path / "cells" / cell.key
  cdir.mkdir(parents=True)
  (cdir / "results.json").write_text(json.dumps({"eval_before": {"strict_solved": 0.1},
                                                 "eval_after": {"strict_solved": 0.2}}))
  (cdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
  out = rp.run_grid({}, [cell], tmp_path, log=lambda *_: None)
  assert out[cell.key]["reward_trend"]["last_mean"] == 39.5


def test_a_cell_results_file_of_the_wrong_shape_is_rerun_not_read(tmp_path):
  # Valid JSON of another shape was taken as the cell's results (a KeyError later, or garbage rows).
  import json

  cell = rp.Cell("sudoku4x4", "diffu_grpo", "base", 0)
  cdir = tmp_path / "cells" / cell.key
  cdir.mkdir(parents=True)
  logged = []
  for bad in ({"eval_before": 5, "eval_after": {"strict_solved": 0.2}},
              {"eval_before": {"strict_solved": "x"}, "eval_after": {"strict_solved": 0.2}}):
    (cdir / "results.json").write_text(json.dumps(bad))
    assert rp.run_grid({}, [cell], tmp_path, log=logged.append, run_missing=False) == {}
  assert "is damaged (eval_before=5 is not an object of metric names to numbers); recomputing it" in logged[0]
  (cdir / "results.json").write_text(json.dumps({"eval_before": {"strict_solved": 0.1},
                                                 "eval_after": {"strict_solved": 0.2}}))
  assert cell.key in rp.run_grid({}, [cell], tmp_path, log=logged.append, run_missing=False)
