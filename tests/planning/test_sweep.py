"""experiments/plan.py's sweeps (daca_jax.planning.sweep): the paper presets come from configs/paper.py, each
setting runs once in its own process, and a sweep resumes where it stopped; the tables render as committed."""
import json
import pathlib
import sys

import pytest

from configs import paper
from daca_jax.errors import ConfigError
from daca_jax.planning import sweep
from daca_jax.planning.report import PAPER_TARGETS, TABLE_TARGETS, render_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Stands in for experiments/plan.py: writes the record a setting would (its flags echoed) and logs the call.
FAKE_PLAN = """import json, pathlib, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
pathlib.Path(args["json"] + ".calls").open("a").write(json.dumps(args) + "\\n")
if "config" in args:
  n = int(args["num_devices"]) if "num_devices" in args else -1  # a --target's devices: not this fake's to know
  record = {"setting": {"num_devices": n}}
else:
  record = {"spec": dict(args, num_devices=int(args.get("num_devices", 0)), lora_rank=int(args["lora_rank"]),
                         strata_batch=int(args.get("strata_batch", 0))), "setting": {"update_rows": 64}}
pathlib.Path(args["json"]).write_text(json.dumps(record))
"""


def test_paper_presets_are_each_base_and_its_daca_arm_that_configs_paper_allows():
  presets = sweep.paper_presets(paper.BASES, paper.NO_ARMS)
  assert presets[:3] == ("d1_gsm8k", "wd1_gsm8k", "gdpo_gsm8k")  # the committed table's rows keep their order
  for base in paper.BASES:
    assert f"{base}_gsm8k" in presets
    try:
      paper.parse_name(f"{base}_gsm8k_daca")
      allowed = True
    except ConfigError:
      allowed = False
    assert (f"{base}_gsm8k_daca" in presets) == allowed
  assert "map_gsm8k_daca" not in presets and len(presets) == 2 * len(paper.BASES) - 1
  assert set(presets) <= set(paper.PRESETS)


def _calls(out: pathlib.Path) -> list[dict[str, str]]:
  part = pathlib.Path(f"{out}.part.calls")
  return [json.loads(x) for x in part.read_text().splitlines()] if part.exists() else []


def test_sweep_runs_each_setting_once_and_resumes(tmp_path, monkeypatch):
  fake = tmp_path / "fake_plan.py"
  fake.write_text(FAKE_PLAN)
  monkeypatch.setattr(sweep, "SWEEP", [(8, "daca", 0, {}), (4, "d1", 128, {}), (8, "daca", 0, {"strata_batch": 1})])
  out = tmp_path / "sweep.json"
  sweep.sweep(str(out), [sys.executable, str(fake)], {"model": "tiny", "strata_batch": 0}, targets=False)
  calls = _calls(out)
  assert [(c["num_devices"], c["method"], c["lora_rank"], c["strata_batch"]) for c in calls] == [
      ("8", "daca", "0", "0"), ("4", "d1", "128", "0"), ("8", "daca", "0", "1")]
  assert all(c["model"] == "tiny" for c in calls)
  data = json.loads(out.read_text())
  assert data["batch"] == 64 and len(data["records"]) == 3
  sweep.sweep(str(out), [sys.executable, str(fake)], targets=False)
  assert len(_calls(out)) == 3 and len(json.loads(out.read_text())["records"]) == 3


def test_target_sweep_compiles_each_machine_with_its_compiler_once(tmp_path, monkeypatch):
  fake = tmp_path / "fake_plan.py"
  fake.write_text(FAKE_PLAN)
  monkeypatch.setattr(sweep, "TARGET_SWEEP", [("gpu:h100x8", "daca", 0, {}), ("tpu:v5p-8", "d1", 128, {}),
                                              ("tpu:v5e-8", "daca", 0, {"rollout_weights": "sharded"})])
  out = tmp_path / "sweep.json"
  sweep.sweep(str(out), [sys.executable, str(fake)])
  assert [(c["target"], c["method"], c.get("rollout_weights")) for c in _calls(out)] == [
      ("gpu:h100x8", "daca", None), ("tpu:v5p-8", "d1", None), ("tpu:v5e-8", "daca", "sharded")]
  assert not any("num_devices" in c for c in _calls(out))
  sweep.sweep(str(out), [sys.executable, str(fake)])  # resumes: nothing left
  assert len(_calls(out)) == 3 and len(json.loads(out.read_text())["records"]) == 3


def test_target_sweep_covers_every_cell_of_the_table():
  from daca_jax.planning import targets
  for target in TABLE_TARGETS.values():
    assert targets.target(target).name == target  # each column is a target the plan knows
    rows = {(m, r) for t, m, r, extra in sweep.TARGET_SWEEP if t == target and not extra}
    assert rows == {("daca", 0), ("daca", 128), ("d1", 0), ("d1", 128)}


def test_paper_sweep_plans_each_preset_on_each_target_once(tmp_path):
  fake = tmp_path / "fake_plan.py"
  fake.write_text(FAKE_PLAN)
  out = tmp_path / "paper.json"
  sweep.paper_sweep(str(out), [sys.executable, str(fake)], "configs/paper.py", ["a_gsm8k", "b_gsm8k"])
  entries = json.loads(out.read_text())["entries"]
  # each machine twice: compiled by its own compiler (--target) and for simulated CPU devices beside it
  want = [(p, name) for p in ("a_gsm8k", "b_gsm8k") for _, target, _, n in PAPER_TARGETS
          for name in (target, f"cpu:{n}")]
  assert [(e["preset"], e["target"]) for e in entries] == want
  calls = [json.loads(line) for line in pathlib.Path(f"{out}.part.calls").read_text().splitlines()]
  assert [c.get("target") or f"cpu:{c['num_devices']}" for c in calls] == [t for _, t in want]
  assert [e["device"] for e in entries][:4] == ["h100", "h100", "v5p", "v5p"]
  sweep.paper_sweep(str(out), [sys.executable, str(fake)], "configs/paper.py", ["a_gsm8k", "b_gsm8k", "c_gsm8k"])
  assert [e["preset"] for e in json.loads(out.read_text())["entries"]][-1] == "c_gsm8k"
  assert len(json.loads(out.read_text())["entries"]) == 3 * 2 * len(PAPER_TARGETS)


@pytest.mark.parametrize("name, first", [("plan_results", "Predicted from programs compiled for simulated CPU"),
                                         ("paper_plan", "Predicted by `python experiments/plan.py --config")])
def test_render_file_reads_either_results_file(name, first):
  table = render_file(ROOT / "docs" / "results" / f"{name}.json", mfu=0.4, usable=0.9)
  assert table.startswith(first) and "| --- " not in table and table.count("\n|") >= 4
