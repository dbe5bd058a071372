"""Prints the main job's variant study (``docs/results/main_job_variants.json``) as the README's table.

  python experiments/variants_table.py [--results=docs/results/main_job_variants.json] [--arms=a,b] [--reference=arm]
      [--runs=countdown_runs]
"""
import pathlib as _pathlib
import sys as _sys

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags

from daca_jax.run.cli_errors import reported_errors
from daca_jax.run.variants import read_variants, variants_table

_RESULTS = flags.DEFINE_string("results", str(_pathlib.Path(__file__).resolve().parents[1] / "docs" / "results"
                                              / "main_job_variants.json"), "The variants file.")
_ARMS = flags.DEFINE_list("arms", None, "Arms to show, in this order (default: all, as first seen).")
_REFERENCE = flags.DEFINE_string("reference", "old default", "The arm the paired columns subtract.")
_RUNS = flags.DEFINE_string("runs", "runs", "The file's list of runs: runs (Sudoku main job) | countdown_runs.")


def main(argv):
  del argv
  with reported_errors():
    print(variants_table(read_variants(_RESULTS.value, _RUNS.value), _REFERENCE.value, _ARMS.value))


if __name__ == "__main__":
  app.run(main)
