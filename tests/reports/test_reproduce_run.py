"""experiments/reproduce.py's library (daca_jax.reports.reproduce_run): its checks, the cells its flags ask
for and the files a grid writes."""
import json
import pathlib

import pytest

from daca_jax.errors import ConfigError
from daca_jax.reports import reproduce_run as rr

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("workdir, lists, match", [
    ("", {"--seeds": ["0"]}, "--workdir"),
    ("w", {"--configs": [], "--seeds": ["0"]}, "--configs.*non-empty"),
    ("w", {"--seeds": ["0", "x"]}, "--seeds.*integers"),
])
def test_check_args_names_the_flag(workdir, lists, match):
  with pytest.raises(ConfigError, match=match):
    rr.check_args(workdir, lists)


def test_check_args_returns_the_seeds():
  assert rr.check_args("w", {"--seeds": ["3", " 4"]}) == [3, 4]


def test_finished_only_needs_an_existing_grid_folder(tmp_path):
  """--finished_only runs nothing: a folder that does not exist is refused (it failed writing grid.md)."""
  with pytest.raises(ConfigError, match="--workdir.*existing grid folder"):
    rr.check_args(str(tmp_path / "none"), {"--seeds": ["0"]}, finished_only=True)
  assert rr.check_args(str(tmp_path), {"--seeds": ["0"]}, finished_only=True) == [0]


def test_cells_of_bases_with_their_own_arms_and_of_a_study(tmp_path):
  configs = rr.task_configs([str(ROOT / "configs/sudoku_tiny.py") + ":smoke"], "quick", num_val_examples=8)
  assert list(configs) == ["sudoku4x4"] and configs["sudoku4x4"].task.num_val_examples == 8
  cells = rr.requested_cells(configs, [0, 1], bases=["diffu_grpo", "rldf:base"], arms=["base", "+DPS"])
  assert sorted({(c.base, c.arm) for c in cells}) == [("diffu_grpo", "+DPS"), ("diffu_grpo", "base"), ("rldf", "base")]
  assert len(cells) == 6
  with pytest.raises(ValueError, match="arm"):
    rr.requested_cells(configs, [0], bases=["wd1"], arms=["+XYZ"])
  study = str(ROOT / "configs/credit_study.py")
  cells = rr.requested_cells(configs, [0], bases=["wd1"], arms=["base"], study=study, arms_given=True)
  assert [(c.arm, c.base) for c in cells] == [("base", cells[0].base)] and cells[0].overrides
  with pytest.raises(ConfigError, match="--arms"):
    rr.requested_cells(configs, [0], bases=[], arms=["nope"], study=study, arms_given=True)
  bad = tmp_path / "study.py"
  bad.write_text("def get_arms():\n  return {'x': [('rl.nope', 1)]}\n")
  with pytest.raises(ConfigError, match="rl.nope"):
    rr.requested_cells(configs, [0], bases=[], arms=[], study=str(bad))
  with pytest.raises(ConfigError, match="--study"):
    rr.requested_cells(configs, [0], bases=[], arms=[], study=str(tmp_path / "missing.py"))


def test_a_study_variant_is_passed_to_its_arms(tmp_path):
  configs = rr.task_configs([str(ROOT / "configs/sudoku_tiny.py") + ":smoke"], "quick")
  for blanks in (8, 11):
    cells = rr.requested_cells(configs, [0], bases=[], arms=[], study=f"{ROOT / 'configs/credit_headroom.py'}:{blanks}")
    assert {c.arm for c in cells} == {f"SML alone, {blanks} blanks", f"oracle token_reward + SML, {blanks} blanks"}
    assert all(("task.num_blanks", blanks) in c.overrides for c in cells)
  with pytest.raises((ConfigError, ValueError), match="variant '7' is not one of"):
    rr.requested_cells(configs, [0], bases=[], arms=[], study=f"{ROOT / 'configs/credit_headroom.py'}:7")


def test_recipe_deviations_name_each_field_the_grid_changes():
  table = rr.recipe_deviations(str(ROOT / "configs/sota_grid.py"), str(ROOT / "configs/sudoku_tiny.py"), "standard")
  lines = table.splitlines()
  assert lines[0].startswith("| field | d1 (`d1_sudoku` → 'base') | spg (`spg_sudoku` → 'spg') |")
  rows = {line.split(" | ")[0].strip("| `"): line.split(" | ")[1:] for line in lines[2:]}
  # μ: d1 8, SPG 4, ESPO 8, BGPO 1 (its own), MAP 12, all 1 here; MAP's StepMerge segments 32 -> 5
  assert rows["rl.num_iterations"][:5] == ["8 → 1", "4 → 1", "8 → 1", "=", "12 → 1"]
  assert rows["likelihood.stepmerge.segments"][:5] == ["=", "=", "=", "=", "32 → 5"]
  assert rows["likelihood.spg_block.num_t"][1] == "2 → 1" and rows["likelihood.elbo_mc.samples"][3] == "16 → 4"
  assert all(r[-1].strip(" |") for r in rows.values())  # every difference says why
  with pytest.raises(ConfigError, match="get_bases"):
    rr.recipe_deviations(str(ROOT / "configs/credit_study.py"), str(ROOT / "configs/sudoku_tiny.py"), "standard")


def test_write_grid_keeps_the_finished_cells(tmp_path):
  cells = rr.rp.grid(["sudoku4x4"], ["diffu_grpo"], [0, 1], arms=("base",))
  results = {cells[0].key: {"eval_before": {"strict_solved": 0.2}, "eval_after": {"strict_solved": 0.3},
                            "timings": {"rl_s": 1.0}, "other": 1}}
  done, table = rr.write_grid(tmp_path, "quick", cells, results)
  assert done == cells[:1] and "sudoku4x4" in table
  assert (tmp_path / "grid.md").read_text() == table + "\n" and (tmp_path / "grid.png").exists()
  written = json.loads((tmp_path / "results.json").read_text())
  assert written["preset"] == "quick" and list(written["cells"]) == [cells[0].key]
  assert set(written["cells"][cells[0].key]) == {"eval_before", "eval_after", "timings"}


def test_collapse_study_arms_change_one_field_of_their_grid_cell():
  from configs import collapse_study, paper, sota_grid

  arms, refs, grid = collapse_study.get_arms(), collapse_study.get_references(), sota_grid.get_arms()
  assert set(refs) | {f"{b} (grid)" for b in collapse_study.COLLAPSED} == set(arms)
  for name, overrides in arms.items():
    base = name.split(",")[0].removesuffix(" (grid)")
    assert overrides[:len(grid[base])] == grid[base], name  # the grid's own recipe first
    extra = overrides[len(grid[base]):]
    if name in refs:
      assert refs[name] == f"{base} (grid)" and len(extra) == 1, name
      field, value = extra[0]
      if field in collapse_study.REFERENCE_FIELDS[base]:  # the published value, from the paper preset
        section, key = field.split(".")
        assert value == paper.get_config(f"{sota_grid.get_bases()[base]}_sudoku")[section][key], name
      else:
        assert field in ("rl.replicate", "rl.learning_rate"), name
    else:
      assert extra == [], name
  assert arms["map, rollout.temperature=0.9"][-1] == ("rollout.temperature", 0.9)
  assert arms["spg + SML, rl.num_iterations=4"][-1] == ("rl.num_iterations", 4)
  configs = rr.task_configs([str(ROOT / "configs/sudoku_tiny.py")], "standard")  # as its docstring runs it
  cells = rr.requested_cells(configs, [2], bases=[], arms=[], study=str(ROOT / "configs/collapse_study.py"))
  assert len(cells) == len(arms)  # every override is a field of the config
  lr = collapse_study.get_arms("lr")  # the learning-rate arm of each base, for every warm start
  assert lr == {f"{b}, rl.learning_rate=2e-05": grid[b] + [("rl.learning_rate", 2e-5)] for b in ("map", "spg", "spg + SML")}
  assert {k: v for k, v in arms.items() if "learning_rate" in k} == {k: v for k, v in lr.items() if k.split(",")[0] != "spg"}
  assert collapse_study.get_arms("beta") == {"map, rl.beta=0.04": grid["map"] + [("rl.beta", 0.04)]}
  beta = rr.requested_cells(configs, [2], bases=[], arms=[], study=str(ROOT / "configs/collapse_study.py") + ":beta")
  assert [c.arm for c in beta] == ["map, rl.beta=0.04"]  # a valid config (SPG refuses β != 0)
  paired = collapse_study.get_arms("paired")  # the lr and beta arms beside the main job's recipe, rerun here
  assert paired == {"d1 + SML (grid)": grid["d1 + SML"], **collapse_study.get_arms("beta"), **lr}
  cells = rr.requested_cells(configs, [0], bases=[], arms=[], study=str(ROOT / "configs/collapse_study.py") + ":paired")
  assert [c.arm for c in cells] == list(paired)
  with pytest.raises(ValueError, match="variant 'mu' is not one of"):
    collapse_study.get_arms("mu")
