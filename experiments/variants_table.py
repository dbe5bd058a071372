"""Prints the main job's variant study (``docs/results/main_job_variants.json``) as the README's table.

  python experiments/variants_table.py [--results=docs/results/main_job_variants.json] [--arms=a,b] [--reference=arm]
      [--runs=countdown_runs] [--seeds=0,1,2] [--timing]
  python experiments/variants_table.py --per_seed="default (co 32x4/8 cos2e-4 std 200 it)" --seeds=0,1,2
"""
import pathlib as _pathlib


from absl import flags

from daca_jax.errors import ConfigError
from daca_jax.run import cli_errors
from daca_jax.run.cli_errors import reported_errors
from daca_jax.reports.variants import METRICS, read_variants, seed_table, variants_table

_RESULTS = flags.DEFINE_string("results", str(_pathlib.Path(__file__).resolve().parents[1] / "docs" / "results"
                                              / "main_job_variants.json"), "The variants file.")
_ARMS = flags.DEFINE_list("arms", None, "Arms to show, in this order (default: all, as first seen).")
_REFERENCE = flags.DEFINE_string("reference", "old default", "The arm the paired columns subtract (\"\": no "
                                 "paired columns).")
_RUNS = flags.DEFINE_string("runs", "runs", "The file's list of runs: runs (Sudoku main job) | countdown_runs.")
_SEEDS = flags.DEFINE_list("seeds", None, "Only these seeds' runs (default: every seed).")
_TIMING = flags.DEFINE_bool("timing", False, "Add each seed's RL wall time and the speed-up over --reference.")
_PER_SEED = flags.DEFINE_string("per_seed", None, "Print this arm's runs seed by seed instead (--arms and "
                                "--reference unused).")


def main(argv):
  del argv
  with reported_errors():
    runs = read_variants(_RESULTS.value, _RUNS.value)
    if _SEEDS.value is not None:
      if not all(s.isdigit() for s in _SEEDS.value):
        raise ConfigError("--seeds", ",".join(_SEEDS.value), "a comma-separated list of seeds (integers)")
      runs = [r for r in runs if str(r["seed"]) in _SEEDS.value]
    if _PER_SEED.value:
      print(seed_table(runs, _PER_SEED.value, METRICS.get(_RUNS.value, "test metric")))
      return
    print(variants_table(runs, _REFERENCE.value, _ARMS.value, timing=_TIMING.value))


if __name__ == "__main__":
  cli_errors.run(main)  # a bad flag: `error: <one line>`, exit 2
