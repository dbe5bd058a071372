"""CPU-scale reproduction grid: {diffu_grpo, wd1, gdpo} × {base, +DPS, +SML, +DACA} × seeds on sudoku4x4.

  python experiments/reproduce.py --workdir=runs/grid --preset=quick      # ≤ 20 min on 2 cores
  python experiments/reproduce.py --workdir=runs/grid_full --preset=full  # the default config, hours

Every arm of a seed starts from the same SFT warm start and gets the same rollouts and updates.
Resumable: a finished cell is never rerun. Writes ``grid.md`` (mean and 95% CI of strict accuracy),
``grid.png`` (grouped bars) and ``results.json`` (every cell's per-seed numbers).
"""
import json
import pathlib

from absl import app, flags, logging
from ml_collections import config_flags

from daca_jax import reproduce as rp
from daca_jax.types import train_config_from_dict

_CONFIG = config_flags.DEFINE_config_file("config", "configs/sudoku_tiny.py", "Base config of the task.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")
_PRESET = flags.DEFINE_enum("preset", "quick", ["quick", "full"], "quick: tiny budget; full: the config as is.")
_BASES = flags.DEFINE_list("bases", ["diffu_grpo", "wd1", "gdpo"], "Base methods.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds.")
flags.mark_flags_as_required(["workdir"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  cfg = train_config_from_dict(_CONFIG.value)
  if _PRESET.value == "quick":
    cfg = rp.quick_preset(cfg)
  work = pathlib.Path(_WORKDIR.value)
  cells = rp.grid([cfg.task.name], _BASES.value, [int(s) for s in _SEEDS.value])
  results = rp.run_grid({cfg.task.name: cfg}, cells, work)
  rows = rp.summarize(cells, results)
  table = rp.markdown(rows)
  (work / "grid.md").write_text(table + "\n")
  rp.plot(rows, work / "grid.png")
  (work / "results.json").write_text(json.dumps(
      {"preset": _PRESET.value, "rows": rows,
       "cells": {c.key: {"eval_before": results[c.key]["eval_before"],
                         "eval_after": results[c.key]["eval_after"]} for c in cells}}, indent=2))
  print(table)


if __name__ == "__main__":
  app.run(main)
