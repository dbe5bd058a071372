"""CPU-scale reproduction grid: tasks × base methods × arms × seeds.

  python experiments/reproduce.py --workdir=runs/grid --preset=quick      # DACA arms, sudoku, ≤ 20 min
  python experiments/reproduce.py --workdir=runs/related --preset=quick \
      --configs=configs/sudoku_tiny.py,configs/countdown_tiny.py --bases=diffu_grpo,rldf:base \
      --arms=base,+DPS,+DACA,+DTCA,+DelTA                              # the related methods
  python experiments/reproduce.py --workdir=runs/grid_std --preset=standard \
      --configs=configs/sudoku_tiny.py,configs/countdown_tiny.py \
      --bases=diffu_grpo,wd1,gdpo,rldf:base --arms=base,+DPS,+SML,+DACA,+DTCA,+DelTA  # each task's own recipe; hours
  python experiments/reproduce.py --workdir=runs/grid_full --preset=full  # the default configs, hours
  python experiments/reproduce.py --workdir=runs/credit_study --preset=study \
      --study=configs/credit_study.py --num_val_examples=500             # named arms by config overrides
  python experiments/reproduce.py --workdir=runs/credit_protocol --preset=credit \
      --study=configs/credit_protocol.py --seeds=10,11,12,13,14,15,16,17,18,19 \
      --variants=docs/results/credit_protocol.json --sealed_test        # + a variants file with outcomes

Arms: base (uniform credit, the base method's own estimator), +DPS, +SML, +DACA (DPS + SML), +DTCA,
+DelTA. Every arm of a (task, seed) starts from the same SFT warm start and gets the same rollouts and
updates. Resumable: a finished cell is never rerun. Writes ``grid.md`` (mean and 95% CI of each task's
primary metric), ``grid.png`` and ``results.json`` (every cell's per-seed numbers); with ``--variants``,
also a variants file of the finished cells (``experiments/variants_table.py`` prints it, with the paired
bootstrap over warm starts and examples from the copied per-example outcomes).
"""
import sys as _sys

import importlib.util
import pathlib

from absl import app, flags, logging

from daca_jax.reports import reproduce as rp
from daca_jax.reports import variant_runs
from daca_jax.run.cli_errors import reported_errors
from daca_jax.errors import ConfigError
from daca_jax.io_utils import atomic_write_json, atomic_write_text
from daca_jax.configure import train_config_from_dict

_CONFIGS = flags.DEFINE_list("configs", ["configs/sudoku_tiny.py"],
                             "Config files (path[:preset]), one per task.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")
_PRESET = flags.DEFINE_enum("preset", "quick", list(rp.PRESETS),
                            "quick: plumbing budget; standard: each task config's own recipe (where its base arms "
                            "learn), validation every 25 iterations; study: the credit study's budget; credit: standard with a "
                            "fixed 5,000-item validation split, validated before and after RL (the pre-registered "
                            "credit comparison); "
                            "full: the config as is.")
_BASES = flags.DEFINE_list("bases", ["diffu_grpo", "wd1", "gdpo"],
                          "Base methods; 'name:arm/arm' runs only those arms on that base (e.g. rldf:base).")
_ARMS = flags.DEFINE_list("arms", list(rp.ARMS), f"Arms: {list(rp.ARMS + rp.RELATED_ARMS)}.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds.")
_STUDY = flags.DEFINE_string("study", None, "A file whose get_arms() names arms by config overrides "
                             "(e.g. configs/credit_study.py); replaces --bases/--arms.")
_VAL = flags.DEFINE_integer("num_val_examples", None, "Validation puzzles per task (task.num_val_examples); "
                            "the table then reports the validation change arms are chosen on.")
_FINISHED = flags.DEFINE_bool("finished_only", False, "Run nothing: summarise the cells that have finished.")
_VARIANTS = flags.DEFINE_string("variants", None, "Also write the finished cells as a variants file (read by "
                                "experiments/variants_table.py), each run's per-example outcomes copied, gzip-"
                                "compressed, into the folder <file stem>/ beside it.")
_SEALED = flags.DEFINE_bool("sealed_test", False, "With --variants: null test scores and no test outcomes (a study "
                            "that reads its test set only after its decision).")
_TABLE_FROM = flags.DEFINE_string("table_from", None, "Print the markdown table of a grid's results.json "
                                  "(e.g. the committed docs/results/credit_study.json) and exit.")


def _load_module(path: str, flag: str):
  file = pathlib.Path(path)
  if not file.is_file():
    raise ConfigError(flag, path, "an existing Python file (configs/*.py)")
  module_spec = importlib.util.spec_from_file_location(file.stem, file)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module


def _load_config(spec: str):
  path, _, preset = spec.partition(":")
  module = _load_module(path, "--configs")
  return train_config_from_dict(module.get_config(preset) if preset else module.get_config())


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  with reported_errors():  # also a diverging run or a full/read-only disk: `error: <one line>`
    try:
      run()
    except (ConfigError, ValueError, FileNotFoundError) as e:
      print(f"error: {e}", file=_sys.stderr)
      _sys.exit(2)


def run():
  if _TABLE_FROM.value:
    print(rp.markdown(rp.read_rows(_TABLE_FROM.value)))
    return
  if not _WORKDIR.value:
    raise ConfigError("--workdir", "", "an output directory")
  for name, flag in (("--configs", _CONFIGS), ("--bases", _BASES), ("--arms", _ARMS), ("--seeds", _SEEDS)):
    if not flag.value:
      raise ConfigError(name, "", "a non-empty comma-separated list")
  if not all(s.strip().isdigit() for s in _SEEDS.value):
    raise ConfigError("--seeds", ",".join(_SEEDS.value), "comma-separated integers >= 0")
  configs = {}
  for spec in _CONFIGS.value:
    cfg = _load_config(spec)
    if _VAL.value is not None:
      cfg = rp.with_overrides(cfg, [("task.num_val_examples", _VAL.value)])
    configs[cfg.task.name] = rp.PRESETS[_PRESET.value](cfg)
  seeds = [int(s) for s in _SEEDS.value]
  cells = []
  if _STUDY.value:
    arms = _load_module(_STUDY.value, "--study").get_arms()
    if flags.FLAGS["arms"].present:  # a subset of the study's arms
      unknown = [a for a in _ARMS.value if a not in arms]
      if unknown:
        raise ConfigError("--arms", ",".join(unknown), f"arms of {_STUDY.value}: {list(arms)}")
      arms = {a: arms[a] for a in _ARMS.value}
    for name, overrides in arms.items():
      for c in configs.values():  # a bad override: a clear error before any work
        rp.with_overrides(c, overrides)
    cells = rp.study_grid(list(configs), seeds, arms)
  for spec in ([] if _STUDY.value else _BASES.value):
    base, _, arms = spec.partition(":")
    arms = arms.split("/") if arms else _ARMS.value
    for arm in arms:
      rp.arm_methods(base, arm)  # unknown arm or base: a clear error before any work
    cells += rp.grid(list(configs), [base], seeds, arms=arms)
  work = pathlib.Path(_WORKDIR.value)
  results = rp.run_grid(configs, cells, work, run_missing=not _FINISHED.value)
  cells = [c for c in cells if c.key in results]
  rows = rp.summarize(cells, results)
  table = rp.markdown(rows)
  atomic_write_text(work / "grid.md", table + "\n")
  rp.plot(rows, work / "grid.png")
  atomic_write_json(work / "results.json",
      {"preset": _PRESET.value, "rows": rows,
       "cells": {c.key: {k: results[c.key][k] for k in ("eval_before", "eval_after", "val_before", "val_after",
                                                         "reward_trend", "grad_agreement", "timings")
                         if k in results[c.key]} for c in cells}})
  if _VARIANTS.value:
    _write_variants(pathlib.Path(_VARIANTS.value), cells, work)
  print(table)


def _write_variants(path: pathlib.Path, cells, work: pathlib.Path) -> None:
  """The finished cells as a variants file at ``path`` (daca_jax.reports.variant_runs)."""
  lists = {}
  for c in cells:
    lists.setdefault(variant_runs.list_key(c.task), []).append(variant_runs.variants_run(
        work / "cells" / c.key, arm=c.arm, seed=c.seed, overrides=c.overrides, metric=rp.primary_metric(c.task),
        folder=path.parent, outcomes_dir=path.parent / path.stem, sealed_test=_SEALED.value))
  variant_runs.write_variants(path, lists, what=f"experiments/reproduce.py grid {work} (--preset={_PRESET.value})"
                              + (", test set sealed" if _SEALED.value else ""))


if __name__ == "__main__":
  app.run(main)
