"""The paper plan table names the rollout mode of each row and prints assess()'s seconds."""
import copy
import json
import pathlib

from daca_jax.planning.devices import device_spec
from daca_jax.planning.plan import assess
from daca_jax.planning.report import paper_table

PLAN = pathlib.Path(__file__).resolve().parents[2] / "docs" / "results" / "paper_plan.json"


def _row(table: str, preset: str) -> str:
  return next(line for line in table.splitlines() if line.startswith(f"| {preset} |"))


def test_fast_rollout_settings_are_named_in_the_row():
  data = json.loads(PLAN.read_text())
  entry = next(e for e in data["entries"] if e["preset"] == "d1_gsm8k_daca" and e["device"] == "h100")
  plain = _row(paper_table({"entries": [entry]}, mfu=0.4, usable=0.9), "d1_gsm8k_daca")
  assert "kv_cache" not in plain and "threshold" not in plain
  seconds = assess(entry["plan"], device_spec("h100"), mfu=0.4, usable_fraction=0.9)["iteration_s"]
  assert f"**{seconds:.1f} s**" in plain
  fast = copy.deepcopy(entry)
  fast["plan"]["setting"].update(kv_cache="dual", threshold=0.9)
  row = _row(paper_table({"entries": [fast]}, mfu=0.4, usable=0.9), "d1_gsm8k_daca")
  assert row.split(" | ")[1].endswith("kv_cache dual, threshold 0.9")
