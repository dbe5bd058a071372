"""A finished main job as one run of a variants file (:mod:`daca_jax.reports.variants`' layout), its
per-example outcomes copied beside that file: how a study's grid becomes the results file that
``experiments/variants_table.py`` reads (``experiments/reproduce.py --variants``).

The outcomes of each split go, gzip-compressed (a committed results file stays small; the keys are
the same in every run), to ``<outcomes_dir>/<arm slug>_seed<seed>.<split>.outcomes.jsonl.gz``, and the
run names them relative to the variants file's folder. A study that keeps the test set sealed until its
decision (``sealed_test``) writes null test scores and copies no test outcomes.
"""
from __future__ import annotations

import datetime
import gzip
import os
import pathlib
import re
from typing import Any, Mapping, Sequence

from daca_jax.errors import DataError
from daca_jax.io_utils import atomic_write_bytes, atomic_write_json, read_json
from daca_jax.run.metrics import read_metrics

# A variants run's outcome splits -> the main job's evaluation (results.json's "outcomes" names its file).
SPLITS = {"val_after": "val_after", "test_after": "eval_after"}


def _override_flag(name: str, value: Any) -> str:
  """``--config.<name>=<value>`` as the variants files write overrides (booleans lower-case)."""
  return f"--config.{name}={str(value).lower() if isinstance(value, bool) else value}"


def variants_run(workdir: str | os.PathLike, *, arm: str, seed: int, overrides: Sequence[tuple[str, Any]],
                 metric: str, folder: str | os.PathLike, outcomes_dir: str | os.PathLike,
                 sealed_test: bool = False) -> dict[str, Any]:
  """One run of a variants file from the main job in ``workdir``.

  Args:
    workdir: a finished main job (its ``results.json``, ``metrics.jsonl`` and outcomes files).
    arm, seed, overrides: the run's arm, warm start seed and config overrides ``[(field, value)]``.
    metric: the score the file reports (the task's primary metric).
    folder: the variants file's folder (outcome paths are relative to it).
    outcomes_dir: where the outcomes are copied (created if missing).
    sealed_test: write null test scores and no test outcomes.
  Returns:
    ``{"arm", "overrides", "seed", "test_before", "test_after", "val_before", "val_curve", "val_after",
    "reward_rise", "outcomes"}``.
  Raises:
    FileNotFoundError: no ``results.json``.
    DataError: the run has no training-reward trend (RL did not run) or lacks ``metric``, or an
      outcomes file it names is missing.
  """
  workdir, folder, outcomes_dir = pathlib.Path(workdir), pathlib.Path(folder), pathlib.Path(outcomes_dir)
  results = read_json(workdir / "results.json", fix="rerun the cell to rewrite it")
  trend = results.get("reward_trend")
  if not trend or metric not in results.get("eval_after", {}):
    raise DataError(f"{workdir}/results.json: no training-reward trend or no {metric!r}: not a finished RL run")
  records = read_metrics(workdir / "metrics.jsonl") if (workdir / "metrics.jsonl").exists() else []
  val_before = results.get("val_before")
  run = {"arm": arm, "overrides": [_override_flag(k, v) for k, v in overrides], "seed": seed,
         "test_before": None if sealed_test else results["eval_before"][metric],
         "test_after": None if sealed_test else results["eval_after"][metric],
         "val_before": None if val_before is None else val_before[metric],
         "val_curve": [r[f"val/{metric}"] for r in records if f"val/{metric}" in r],
         "val_after": results["val_after"][metric] if "val_after" in results else None,
         "reward_rise": trend["last_mean"] - trend["first_mean"], "outcomes": {}}
  slug = re.sub(r"[^A-Za-z0-9.-]+", "_", arm).strip("_")
  outcomes_dir.mkdir(parents=True, exist_ok=True)
  for split, evaluation in SPLITS.items():
    name = results.get("outcomes", {}).get(evaluation)
    if name is None or (sealed_test and split == "test_after"):
      continue
    source = workdir / name
    if not source.is_file():
      raise DataError(f"{workdir}/results.json names the outcomes file {name} of {split}, which does not exist")
    target = outcomes_dir / f"{slug}_seed{seed}.{split}.outcomes.jsonl.gz"
    atomic_write_bytes(target, gzip.compress(source.read_bytes(), mtime=0))  # mtime 0: the same bytes every time
    run["outcomes"][split] = os.path.relpath(target, folder)
  return run


def list_key(task: str) -> str:
  """The list of a variants file that holds ``task``'s runs: ``runs`` for the main job's Sudoku,
  ``<task>_runs`` otherwise (``countdown_runs``; :data:`daca_jax.reports.variants.METRICS`)."""
  return "runs" if task == "sudoku4x4" else f"{task}_runs"


def write_variants(path: str | os.PathLike, runs: Mapping[str, Sequence[dict[str, Any]]], *, what: str) -> None:
  """Writes a variants file: ``runs`` maps a list name (:func:`list_key`) to its runs; ``runs`` is
  always there (every variants file has it), with ``what`` and today's date."""
  data: dict[str, Any] = {"what": what, "date": datetime.date.today().isoformat(), "runs": []}
  data.update({key: list(value) for key, value in runs.items()})
  atomic_write_json(path, data)


__all__ = ["SPLITS", "list_key", "variants_run", "write_variants"]
