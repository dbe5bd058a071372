"""The main job's variant table (daca_jax.reports.variants): per-seed changes, means, CIs and pairing."""
import json
import re

import pytest

from daca_jax.errors import DataError
from daca_jax.reports.variants import read_variants, seed_table, variants_table


def _run(arm, seed, tb, ta, vb, va, rise=0.01):
  return {"arm": arm, "seed": seed, "test_before": tb, "test_after": ta, "val_before": vb,
          "val_curve": [0.0, va], "reward_rise": rise, "overrides": []}


def test_table_pairs_by_seed_and_keeps_the_last_run_of_each_arm_and_seed(tmp_path):
  runs = [_run("default", 0, 0.2, 0.3, 0.2, 0.25), _run("default", 1, 0.5, 0.4, 0.5, 0.5),
          _run("new", 0, 0.2, 0.9, 0.2, 0.9),  # replaced below by the later run of (new, 0)
          _run("new", 0, 0.2, 0.4, 0.2, 0.35), _run("new", 1, 0.5, 0.6, 0.5, 0.52, rise=-0.02),
          _run("new", 2, 0.3, 0.3, 0.3, 0.3),
          _run("default", 2, 0.31, 0.5, 0.3, 0.6)]  # another warm start than new's seed 2: not paired
  path = tmp_path / "v.json"
  path.write_text(json.dumps({"what": "t", "runs": runs}))
  rows = read_variants(path)
  assert len(rows) == 6
  md = variants_table(rows, arms=["default", "new"]).splitlines()
  assert md[2].startswith("| default | 0/1/2 | +10.0 / -10.0 / +19.0 |")
  new = md[3].split(" | ")
  assert new[1:4] == ["0/1/2", "+20.0 / +10.0 / +0.0", "+10.0 ± 24.8"]
  assert new[6] == "+0.010 / -0.020 / +0.010"
  # test: (20 - 10, 10 - (-10)) = (10, 20), mean 15, t(1) * sd / sqrt 2 = 12.706 * 7.071 / 1.414 = 63.5
  # p: t = 15 / (7.071 / 1.414) = 3 on 1 df; each split's family holds this one comparison: Holm = p
  assert new[7] == "+15.0 ± 63.5 (n=2; p 0.205, Holm 0.205)"
  assert new[8] == "+6.0 ± 50.8 (n=2; p 0.374, Holm 0.374) |"  # validation: (15 - 5, 2 - 0) = (10, 2)
  assert "test (Holm over 1)" in md[0] and "validation (Holm over 1)" in md[0]


def test_bad_files_name_what_is_wrong(tmp_path):
  p = tmp_path / "v.json"
  p.write_text(json.dumps({"runs": [{"arm": "a", "seed": 0}]}))
  with pytest.raises(DataError, match=r"runs\[0\] lacks \['test_before'"):
    read_variants(p)
  p.write_text("[]")
  with pytest.raises(DataError, match="not a variants file"):
    read_variants(p)
  p.write_text(json.dumps({"runs": [_run("a", 0, 0, 0, 0, 0)]}))
  with pytest.raises(DataError, match=r"arms \['b'\] are not in the file"):
    variants_table(read_variants(p), arms=["b"])


@pytest.mark.parametrize("runs, message", [
    ([1, "x"], r"runs\[0\] is int, not a run"),
    ([dict(_run("a", 0, 0, 0, 0, 0), arm=["a"])], r"runs\[0\]\.arm=\['a'\]: expected a string"),
    ([dict(_run("a", 0, 0, 0, 0, 0), seed="0")], r"runs\[0\]\.seed='0': expected an integer"),
    ([dict(_run("a", 0, 0, 0, 0, 0), test_after="0.5")], r"runs\[0\]\.test_after='0.5': expected a number or null"),
    ([dict(_run("a", 0, 0, 0, 0, 0), val_curve=[0.1, None])], r"val_curve=\[0.1, None\]: expected a list of numbers"),
    ([dict(_run("a", 0, 0, 0, 0, 0), reward_rise=True)], r"reward_rise=True: expected a number"),
])
def test_a_run_of_the_wrong_shape_is_a_data_error_naming_the_field(tmp_path, runs, message):
  # Valid JSON of the wrong shape was a TypeError from deep in the table (a traceback, exit 1).
  p = tmp_path / "v.json"
  p.write_text(json.dumps({"runs": runs}))
  with pytest.raises(DataError, match=message):
    read_variants(p)


def test_a_second_list_of_runs_and_runs_without_a_validation_split(tmp_path):
  cd = [_run("base", 0, 0.1, 0.2, 0.1, 0.15), _run("base", 1, 0.2, 0.25, 0.2, 0.3),
        dict(_run("new", 0, 0.1, 0.3, None, 0.0), val_curve=[]),  # no validation split
        _run("new", 1, 0.2, 0.4, 0.2, 0.35)]
  path = tmp_path / "v.json"
  path.write_text(json.dumps({"runs": [_run("a", 0, 0, 0, 0, 0)], "countdown_runs": cd}))
  rows = read_variants(path, "countdown_runs")
  assert sorted(r["arm"] for r in rows) == ["base", "base", "new", "new"]
  new = variants_table(rows, reference="base", arms=["new"]).splitlines()[2].split(" | ")
  assert new[2:4] == ["+20.0 / +20.0", "+20.0 ± 0.0"]
  assert new[4:6] == ["n/a / +15.0", "+15.0"]  # the mean of the one validated seed, no interval
  # test: (20 - 10, 20 - 5) = (10, 15): mean 12.5, 12.706 * 3.536 / 1.414 = 31.8; seed 0 pairs on the test alone
  assert new[7] == "+12.5 ± 31.8 (n=2; p 0.126, Holm 0.126)"
  assert new[8] == " |"  # one validated pair: no paired interval
  with pytest.raises(DataError, match=r"no list of runs under 'cd'; the lists there: \['countdown_runs', 'runs'\]"):
    read_variants(path, "cd")


def test_seed_table_lists_one_arm_seed_by_seed_with_the_mean_change():
  runs = [_run("a", 1, 0.5, 0.6, 0.4, 0.5, rise=0.02), _run("a", 0, 0.2, 0.4, 0.3, 0.45, rise=0.04),
          dict(_run("a", 2, 0.1, 0.1, None, 0.0), val_curve=[]), _run("b", 0, 0.0, 0.9, 0.0, 0.9)]
  md = seed_table(runs, "a", "accuracy").splitlines()
  assert md[0] == "| seed | accuracy before → after (test) | change | validation before → after | training reward rise |"
  assert md[2:5] == ["| 0 | 0.200 → 0.400 | +20.0 | 0.300 → 0.450 | +0.040 |",
                     "| 1 | 0.500 → 0.600 | +10.0 | 0.400 → 0.500 | +0.020 |",
                     "| 2 | 0.100 → 0.100 | +0.0 | n/a | +0.010 |"]
  # test (20, 10, 0): mean 10, t(2) 4.303 * 10 / sqrt 3 = 24.8; validation (15, 10) only: 12.5 ± 12.706 * 3.536 / 1.414
  assert md[5] == "| mean ± 95% CI, seeds 0-2 (points) | | +10.0 ± 24.8 | +12.5 ± 31.8 | +0.023 |"
  assert seed_table(runs[:2], "a").splitlines()[-1].startswith("| mean ± 95% CI, seeds 0/1 (points) |")
  with pytest.raises(DataError, match=r"arm 'c' is not in the file \(arms there: \['a', 'b'\]\)"):
    seed_table(runs, "c")


def test_timing_columns_give_minutes_per_seed_and_the_paired_speed_up():
  t = "rl_s_one_core_each_two_runs"
  runs = [dict(_run("ref", 0, 0.2, 0.3, 0.2, 0.3), **{t: 1200.0}), dict(_run("ref", 1, 0.3, 0.4, 0.3, 0.4), **{t: 1800.0}),
          dict(_run("ref", 2, 0.4, 0.5, 0.4, 0.5), **{t: 600.0}),
          dict(_run("fast", 0, 0.2, 0.3, 0.2, 0.3), **{t: 600.0}), dict(_run("fast", 1, 0.3, 0.4, 0.3, 0.4), **{t: 600.0}),
          dict(_run("fast", 2, 0.4, 0.5, 0.4, 0.5), **{t: None})]  # resumed: no comparable time
  md = variants_table(runs, reference="ref", timing=True).splitlines()
  assert md[0].endswith("| RL time (min) | speed-up over ref |")
  assert md[2].endswith("| 20.0 / 30.0 / 10.0 |  |")
  # ratios 1200/600 = 2, 1800/600 = 3: mean 2.5, 12.706 * 0.7071 / sqrt 2 = 6.35; seed 2 has no time
  assert md[3].endswith("| 10.0 / 10.0 / n/a | 2.50× ± 6.35 (n=2) |")
  assert "RL time" not in variants_table(runs, reference="ref")


def test_without_a_reference_the_table_has_no_paired_columns():
  runs = [_run("a", 0, 0.2, 0.3, 0.2, 0.25), _run("a", 1, 0.5, 0.4, 0.5, 0.5), _run("b", 0, 0.2, 0.4, 0.2, 0.3)]
  md = variants_table(runs, reference="").splitlines()
  assert md[0] == ("| arm | seeds | test change (pp) | mean ± 95% CI | validation change (pp) | mean ± 95% CI "
                   "| reward rise |")
  assert md[2] == "| a | 0/1 | +10.0 / -10.0 | +0.0 ± 127.1 | +5.0 / +0.0 | +2.5 ± 31.8 | +0.010 / +0.010 |"
  assert len(md[3].split(" | ")) == 7
  assert variants_table(runs, reference="", timing=True).splitlines()[0].endswith("| reward rise | RL time (min) |")


def test_a_final_re_evaluation_replaces_the_curves_last_point():
  # val_after (the final policy evaluated again, e.g. with another sampler than the curve's) is the
  # validation score the table reads; the curve's last point is read only without it.
  again = dict(_run("a", 0, 0.2, 0.4, 0.3, 0.45), val_after=0.6)
  md = seed_table([again, dict(_run("a", 1, 0.2, 0.4, 0.3, 0.45), val_after=None)], "a").splitlines()
  assert md[2] == "| 0 | 0.200 → 0.400 | +20.0 | 0.300 → 0.600 | +0.010 |"
  assert md[3] == "| 1 | 0.200 → 0.400 | +20.0 | 0.300 → 0.450 | +0.010 |"
  row = variants_table([again], arms=["a"]).splitlines()[2].split(" | ")
  assert row[4] == "+30.0"


def test_runs_with_per_example_outcomes_get_the_bootstrap_interval(tmp_path):
  # Two warm starts scored on the same two test puzzles: the arm solves puzzle e0 where the reference
  # does not, and they agree on e1, so D = [[1, 0], [1, 0]]. A replicate's mean is the share of e0 in
  # its example draw: 0, 1/2, 1 w.p. 1/4, 1/2, 1/4 -> the 95% interval is [0, 1], the mean 1/2.
  outcomes_dir = tmp_path / "outcomes"
  outcomes_dir.mkdir()
  (outcomes_dir / "ref1.jsonl").write_text('{"index": 0, "key": "e0", "strict_solved": 0.0}\n'
                                           '{"index": 1, "key": "e1", "strict_solved": 0.0}\n')
  runs = [dict(_run("ref", 0, 0.2, 0.5, 0.2, 0.3), outcomes={"test_after": {"e0": 0, "e1": 1}}),
          dict(_run("ref", 1, 0.2, 0.0, 0.2, 0.3), outcomes={"test_after": "outcomes/ref1.jsonl"}),
          dict(_run("arm", 0, 0.2, 1.0, 0.2, 0.3), outcomes={"test_after": {"e0": 1, "e1": 1}}),
          dict(_run("arm", 1, 0.2, 0.5, 0.2, 0.4), outcomes={"test_after": {"e0": 1, "e1": 0}})]
  path = tmp_path / "v.json"
  path.write_text(json.dumps({"runs": runs}))
  rows = read_variants(path)
  assert rows[1]["per_example"] == {"test": {"e0": 0.0, "e1": 0.0}}
  cells = variants_table(rows, reference="ref", arms=["arm"]).splitlines()[2].split(" | ")
  # the bootstrap's p: 2 x P(replicate <= 0) = 2 x 1/4 (the example draw that picks e1 twice)
  interval, p_value = re.fullmatch(r"(.*); p ([\d.]+), Holm [\d.]+\)", cells[7]).groups()
  assert interval == "+50.0 [+0.0, +100.0] (n=2×2, bootstrap" and float(p_value) == pytest.approx(0.5, abs=0.04)
  assert cells[8].startswith("+5.0 ± 63.5 (n=2; p ")  # no validation outcomes: the seed-level t interval
  # Outcomes of other examples cannot be paired: one line naming the arms, the seed and the keys.
  runs[3]["outcomes"] = {"test_after": {"e0": 1, "e2": 0}}
  path.write_text(json.dumps({"runs": runs}))
  with pytest.raises(DataError, match=r"test outcomes of 'arm' vs 'ref': .*ref seed 1 lacks 'e2' and has extra 'e1'"):
    variants_table(read_variants(path), reference="ref", arms=["arm"])
  runs[3]["outcomes"] = {"test_after": "outcomes/missing.jsonl"}
  path.write_text(json.dumps({"runs": runs}))
  with pytest.raises(DataError, match=r"runs\[3\]: outcomes file .*missing.jsonl does not exist"):
    read_variants(path)
