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
bootstrap over warm starts and examples from the copied per-example outcomes). ``--jobs=N`` runs N cells
at once, each in a process of its own (one GPU or many cores: the cells are small); a cell's numbers do
not depend on N. A SIGTERM (preemption, a time limit) stops the grid as it stops train.py: the running
cells save their step, no other cell starts, exit status 75; the same command resumes.
"""
import sys as _sys

import pathlib

from absl import flags, logging

from daca_jax.errors import ConfigError
from daca_jax import storage
from daca_jax.io_utils import check_file_path, check_local_path
from daca_jax.reports import grid_findings
from daca_jax.reports import reproduce as rp
from daca_jax.reports import reproduce_run as rr
from daca_jax.run import cli_errors, preemption
from daca_jax.run.cli_errors import reported_errors

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
                             "(e.g. configs/credit_study.py); path:variant calls get_arms(variant) (e.g. "
                             "configs/credit_headroom.py:11); replaces --bases/--arms.")
_VAL = flags.DEFINE_integer("num_val_examples", None, "Validation puzzles per task (task.num_val_examples); "
                            "the table then reports the validation change arms are chosen on.")
_JOBS = flags.DEFINE_integer("jobs", 1, "Cells run at once, each in a process of its own (a seed's first cell "
                             "trains its warm start before the others start); 1: one after the other.",
                             lower_bound=1)
_FINISHED = flags.DEFINE_bool("finished_only", False, "Run nothing: summarise the cells that have finished.")
_VARIANTS = flags.DEFINE_string("variants", None, "Also write the finished cells as a variants file (read by "
                                "experiments/variants_table.py), each run's per-example outcomes copied, gzip-"
                                "compressed, into the folder <file stem>/ beside it.")
_SEALED = flags.DEFINE_bool("sealed_test", False, "With --variants: null test scores and no test outcomes (a study "
                            "that reads its test set only after its decision).")
_FINDINGS_FROM = flags.DEFINE_string("findings_from", None, "Print the paired verdicts of a grid's results.json as "
                                     "sentences (Holm over the table's family; daca_jax.reports.grid_findings).")
_TABLE_FROM = flags.DEFINE_string("table_from", None, "Print the markdown table of a grid's results.json "
                                  "(e.g. the committed docs/results/credit_study.json) and exit.")
_DEVIATIONS = flags.DEFINE_bool("deviations", False, "With --study (a file with get_bases()): print, per arm, each "
                                "recipe field that differs from its method's published preset, and why; exit.")



def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  with reported_errors():  # also a diverging run or a full/read-only disk: `error: <one line>`
    try:
      with preemption.watching():  # SIGTERM: running cells save their step, `preempted: <line>`, exit 75
        run()
    except (ConfigError, ValueError, FileNotFoundError) as e:
      print(f"error: {e}", file=_sys.stderr)
      _sys.exit(2)


def run():
  for flag, value in (("--table_from", _TABLE_FROM.value), ("--findings_from", _FINDINGS_FROM.value)):
    if value and not storage.is_file(check_local_path(value, flag) or value):
      raise ConfigError(flag, value, "a grid's results.json that exists (reproduce.py --workdir=DIR writes "
                        "DIR/results.json; committed ones are in docs/results/)")
  if _TABLE_FROM.value:
    print(rp.markdown(rp.read_rows(_TABLE_FROM.value)))
    return
  if _FINDINGS_FROM.value:
    print(grid_findings.findings(rp.read_results(_FINDINGS_FROM.value)))
    return
  if _DEVIATIONS.value:
    print(rr.recipe_deviations(_STUDY.value, _CONFIGS.value[0], _PRESET.value))
    return
  seeds = rr.check_args(_WORKDIR.value, {"--configs": _CONFIGS.value, "--bases": _BASES.value,
                                         "--arms": _ARMS.value, "--seeds": _SEEDS.value}, _FINISHED.value)
  if _VARIANTS.value:
    check_file_path(_VARIANTS.value, "--variants")  # written after the grid: refused before it runs
  configs = rr.task_configs(_CONFIGS.value, _PRESET.value, _VAL.value)
  cells = rr.requested_cells(configs, seeds, bases=[] if _STUDY.value else _BASES.value, arms=_ARMS.value,
                             study=_STUDY.value, arms_given=flags.FLAGS["arms"].present)
  work = pathlib.Path(_WORKDIR.value)
  results = rp.run_grid(configs, cells, work, run_missing=not _FINISHED.value, jobs=_JOBS.value)
  cells, table = rr.write_grid(work, _PRESET.value, cells, results)
  if _VARIANTS.value:
    rr.write_variants(pathlib.Path(_VARIANTS.value), cells, work, preset=_PRESET.value, sealed_test=_SEALED.value)
  print(table)


if __name__ == "__main__":
  cli_errors.run(main)  # a bad flag: `error: <one line>`, exit 2
