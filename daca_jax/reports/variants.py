"""The main job's variant study as a table: per arm, each seed's change on the test and validation
sets and the training-reward rise, with means, 95% intervals and the difference from a reference arm
paired by seed (same SFT warm start). Reads ``docs/results/main_job_variants.json``
(``{"what", "date", "runs": [{"arm", "overrides", "seed", "test_before", "test_after", "val_before",
"val_curve", "reward_rise", ...}], "countdown_runs": [...]}``; a run without a validation split has
``val_before`` null and an empty ``val_curve``; a run whose policy was evaluated again after training
carries that value as ``val_after``, which then replaces the curve's last point; a study that keeps
the test set sealed until its decision writes ``test_before`` / ``test_after`` as null, shown "n/a");
``experiments/variants_table.py`` prints it, and one arm's runs seed by seed (:func:`seed_table`).

Per-example outcomes: a run may carry ``"outcomes": {"test_after": ..., "val_after": ...}``, each the
path of the evaluation's outcomes file (:mod:`daca_jax.evaluation.outcomes`; relative to the variants file's
folder) or the outcomes themselves as ``{example key: value}`` of the list's metric (:data:`METRICS`).
Where every paired seed of an arm and the reference carries them for a split, the paired column of that
split is the hierarchical bootstrap's interval (:func:`daca_jax.reports.paired.paired_bootstrap`, over warm
starts and examples); elsewhere it stays the seed-level Student-t interval.
"""
from __future__ import annotations

import math
import pathlib
from typing import Any, Sequence

from daca_jax.errors import DataError
from daca_jax.io_utils import read_json
from daca_jax.evaluation.outcomes import read_outcomes
from daca_jax.reports.paired import ALPHA, holm, mean_ci95, p_text, paired_bootstrap, t_p_value

# RL wall time of a run (seconds), measured only when two runs shared a 2-core machine one core each;
# null when the run shared it with anything else or was resumed (the only layout whose times compare).
RL_TIME = "rl_s_one_core_each_two_runs"
_FIELDS = ("arm", "seed", "test_before", "test_after", "val_before", "val_curve", "reward_rise")
# The test metric of each list of runs (the file's "what" says so): d1's Sudoku / Countdown test sets.
METRICS = {"runs": "strict_solved", "countdown_runs": "accuracy"}


def read_variants(path: str | pathlib.Path, key: str = "runs") -> list[dict[str, Any]]:
  """The runs under ``key`` of a variants file (``"runs"``: the Sudoku main job; ``"countdown_runs"``),
  the last one of each (arm, seed) kept.

  Raises:
    FileNotFoundError: no such file.
    DataError: not JSON, not a variants file, no list under ``key`` (the keys there named), a run without one
      of the fields the table reads (named), or a run whose ``outcomes`` cannot be read (module
      docstring). A run's outcomes come back as ``per_example``: ``{"test" | "val": {key: value}}``.
  """
  data = read_json(path, fix="give a variants file (docs/results/main_job_variants.json, or one written by "
                   "experiments/reproduce.py --variants)", kind=None)
  if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
    raise DataError(f"{path}: not a variants file (expected an object with a 'runs' list)")
  if not isinstance(data.get(key), list):
    lists = sorted(k for k, v in data.items() if isinstance(v, list))
    raise DataError(f"{path}: no list of runs under {key!r}; the lists there: {lists}")
  runs: dict[tuple[str, int], dict[str, Any]] = {}
  for i, r in enumerate(data[key]):
    if not isinstance(r, dict):
      raise DataError(f"{path}: {key}[{i}] is {type(r).__name__}, not a run (a JSON object with {list(_FIELDS)})")
    missing = [k for k in _FIELDS if k not in r]
    if missing:
      raise DataError(f"{path}: {key}[{i}] lacks {missing}")
    _check_types(r, f"{path}: {key}[{i}]")
    if r.get("outcomes"):
      r = dict(r, per_example=_per_example(r["outcomes"], pathlib.Path(path).parent, METRICS.get(key, ""),
                                           f"{path}: {key}[{i}]"))
    runs[(r["arm"], r["seed"])] = r
  return list(runs.values())


def _is_number(v: Any, nullable: bool = False) -> bool:
  return (v is None and nullable) or (isinstance(v, (int, float)) and not isinstance(v, bool))


# What the table computes with, per field: (the check, what is allowed).
_TYPES = {
    "arm": (lambda v: isinstance(v, str), "a string"),
    "seed": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "test_before": (lambda v: _is_number(v, True), "a number or null"),
    "test_after": (lambda v: _is_number(v, True), "a number or null"),
    "val_before": (lambda v: _is_number(v, True), "a number or null"),
    "val_after": (lambda v: _is_number(v, True), "a number or null"),
    "val_curve": (lambda v: isinstance(v, list) and all(_is_number(x) for x in v), "a list of numbers"),
    "reward_rise": (_is_number, "a number"),
}


def _check_types(r: dict[str, Any], where: str) -> None:
  """Raises DataError naming the first field of run ``r`` the table cannot compute with."""
  for name, (ok, allowed) in _TYPES.items():
    if name in r and not ok(r[name]):
      raise DataError(f"{where}.{name}={r[name]!r}: expected {allowed}")


def _per_example(outcomes: Any, folder: pathlib.Path, metric: str, where: str) -> dict[str, dict[str, float]]:
  """``{"test" | "val": {example key: value}}`` from a run's ``outcomes`` (module docstring).

  Raises:
    DataError: ``outcomes`` is not an object of files or ``{key: value}`` objects, or a file is missing
      or lacks ``metric`` (named with ``where``).
  """
  if not isinstance(outcomes, dict) or not set(outcomes) <= {"test_after", "val_after"}:
    raise DataError(f"{where}: 'outcomes' must be an object with 'test_after' / 'val_after' entries")
  out = {}
  for name, entry in outcomes.items():
    if isinstance(entry, str):
      file = folder / entry
      if not file.is_file():
        raise DataError(f"{where}: outcomes file {file} does not exist")
      out[name[:-len("_after")]] = read_outcomes(file, metric)
    elif isinstance(entry, dict) and all(isinstance(v, (int, float)) for v in entry.values()):
      out[name[:-len("_after")]] = {str(k): float(v) for k, v in entry.items()}
    else:
      raise DataError(f"{where}: outcomes.{name} must be a file name or an object of example key -> {metric}")
  return out


def _test_change(r: dict[str, Any]) -> float:
  """The run's test change in points; NaN where the file keeps the test set sealed (null scores)."""
  if r["test_before"] is None or r["test_after"] is None:
    return math.nan
  return 100 * (r["test_after"] - r["test_before"])


def _val_after(r: dict[str, Any]) -> float:
  """The run's final validation score: ``val_after`` where the final policy was evaluated again, else
  the curve's last point."""
  return r["val_after"] if r.get("val_after") is not None else r["val_curve"][-1]


def _val_change(r: dict[str, Any]) -> float:
  """The run's validation change in points (its last evaluation); NaN where it had no validation split."""
  return math.nan if r["val_before"] is None or not r["val_curve"] else 100 * (_val_after(r) - r["val_before"])


def _seeds_label(seeds: Sequence[int]) -> str:
  """``0-2`` for consecutive seeds, else ``0/1/3``."""
  if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
    return f"{seeds[0]}-{seeds[-1]}"
  return "/".join(map(str, seeds))


def _fmt(values: Sequence[float]) -> str:
  values = [v for v in values if not math.isnan(v)]
  if not values:
    return "n/a"
  m, ci = mean_ci95(values)
  return f"{m:+.1f}" + ("" if math.isnan(ci) else f" ± {ci:.1f}")


def _per_seed(values: Sequence[float]) -> str:
  """``+1.0 / n/a / -2.0``: each seed's change in points, "n/a" where it has none."""
  return " / ".join("n/a" if math.isnan(v) else f"{v:+.1f}" for v in values)


def _rl_time(r: dict[str, Any]) -> float:
  """The run's comparable RL wall time in seconds (:data:`RL_TIME`), NaN where none was measured."""
  t = r.get(RL_TIME)
  return math.nan if t is None else float(t)


def variants_table(runs: Sequence[dict[str, Any]], reference: str = "default",
                   arms: Sequence[str] | None = None, timing: bool = False) -> str:
  """Markdown: one row per arm (in first-seen order, or ``arms``): seeds, test change per seed and mean
  ± 95% CI (points), the same on validation (its last point), the reward rise per seed, and the test /
  validation change minus ``reference``'s on the seeds both have from the same warm start (the same
  test and validation accuracy before RL, the test alone where a run has no validation split; paired:
  the seed-level t interval ``mean ± half-width (n=seeds; p ..., Holm ...)``, or, where the runs carry
  per-example outcomes, the bootstrap's ``mean [low, high] (n=seeds×examples, bootstrap; ...)``; module
  docstring). Each split's paired comparisons of the table are one family: "**separates**" marks a
  comparison whose Holm-adjusted p-value is below 0.05 (:func:`daca_jax.reports.paired.holm`), and the
  column header says how many the family holds. "n/a": no validation split.

  An empty ``reference`` leaves the paired columns (and the speed-up) out: a study without a reference arm.

  With ``timing``, two more columns: the RL wall time per seed (minutes, :data:`RL_TIME`; "n/a" where
  not comparable) and the speed-up over ``reference`` — the mean over paired seeds with both times of
  reference time / arm time, ± its 95% interval (above 1: the arm's RL ran faster)."""
  by_arm: dict[str, dict[int, dict[str, Any]]] = {}
  for r in runs:
    by_arm.setdefault(r["arm"], {})[r["seed"]] = r
  order = list(arms) if arms is not None else list(by_arm)
  unknown = [a for a in order if a not in by_arm]
  if unknown:
    raise DataError(f"arms {unknown} are not in the file (arms there: {sorted(by_arm)})")
  ref = by_arm.get(reference, {})
  test, val = _test_change, _val_change

  rows, pairs = [], []
  for arm in order:
    seeds = sorted(by_arm[arm])
    rs = [by_arm[arm][s] for s in seeds]
    # Paired only where both runs start from the same warm start (the same seed on another machine
    # can give another one: XLA's floating point).
    # (A run without a validation split is matched on the test set alone.)
    paired = [s for s in seeds if s in ref and ref[s]["test_before"] == by_arm[arm][s]["test_before"]
              and (None in (ref[s]["val_before"], by_arm[arm][s]["val_before"])
                   or ref[s]["val_before"] == by_arm[arm][s]["val_before"])]
    cells = [arm, "/".join(map(str, seeds)), _per_seed([test(r) for r in rs]), _fmt([test(r) for r in rs]),
             _per_seed([val(r) for r in rs]), _fmt([val(r) for r in rs]),
             " / ".join(f"{r['reward_rise']:+.3f}" for r in rs)]
    row_pairs = []
    for f, split in ((test, "test"), (val, "val")):
      d = [] if arm == reference else [f(by_arm[arm][s]) - f(ref[s]) for s in paired]
      d = [x for x in d if not math.isnan(x)]  # a pair without a validation split has no val difference
      if len(d) < 2:
        row_pairs.append(None)
        continue
      boot = _bootstrap_cell([by_arm[arm][s] for s in paired], [ref[s] for s in paired], split, arm, reference)
      if boot:
        row_pairs.append(boot)
        continue
      m, ci = mean_ci95(d)
      row_pairs.append((f"{m:+.1f} ± {ci:.1f} (n={len(d)}", t_p_value(d)))
    pairs.append(row_pairs)
    cells += ["", ""]  # the paired cells, filled in once the family's p-values are all known
    if timing:
      cells.append(" / ".join("n/a" if math.isnan(_rl_time(r)) else f"{_rl_time(r) / 60:.1f}" for r in rs))
      ratios = [] if arm == reference else [_rl_time(ref[s]) / _rl_time(by_arm[arm][s]) for s in paired]
      ratios = [x for x in ratios if not math.isnan(x)]
      if not ratios:
        cells.append("")
      else:
        m, ci = mean_ci95(ratios)
        cells.append(f"{m:.2f}×" + ("" if math.isnan(ci) else f" ± {ci:.2f}") + f" (n={len(ratios)})")
    rows.append(cells)
  sizes = []
  for j in range(2):  # a family per split: the table's paired comparisons on test, and on validation
    found = [rp[j] for rp in pairs if rp[j] is not None]
    adjusted = iter(holm([p for _, p in found]))
    sizes.append(len(found))
    for cells, rp in zip(rows, pairs):
      if rp[j] is not None:
        cells[7 + j] = holm_cell(*rp[j], next(adjusted))
  head = ["arm", "seeds", "test change (pp)", "mean ± 95% CI", "validation change (pp)", "mean ± 95% CI",
          "reward rise", f"paired − {reference}: test (Holm over {sizes[0]})", f"validation (Holm over {sizes[1]})"]
  if timing:
    head += ["RL time (min)", f"speed-up over {reference}"]
  if not reference:  # no reference arm: no paired columns
    keep = [j for j, name in enumerate(head) if j not in (7, 8) and not name.startswith("speed-up")]
    head, rows = [head[j] for j in keep], [[cells[j] for j in keep] for cells in rows]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in rows])


def holm_cell(interval: str, p: float, adjusted: float) -> str:
  """A paired cell: the raw interval (``interval``, its closing parenthesis still open), the raw and the
  Holm-adjusted p-value of its family, and "**separates**" when the adjusted one is below
  :data:`~daca_jax.reports.paired.ALPHA`."""
  if math.isnan(p):
    return interval + ")"
  verdict = "; **separates**" if adjusted < ALPHA else ""
  return f"{interval}; p {p_text(p)}, Holm {p_text(adjusted)}{verdict})"


def _bootstrap_cell(arm_runs: Sequence[dict[str, Any]], ref_runs: Sequence[dict[str, Any]], split: str,
                    arm: str, reference: str) -> tuple[str, float] | None:
  """The paired column's interval from per-example outcomes (points: mean [95% interval], n = warm starts
  × examples) and its p-value, or None when a run of the pairs lacks them for ``split``.
  The runs of a pair start from one warm start (same score before RL), so the difference of their
  changes is the difference of their scores after RL, which the outcomes hold."""
  if not all(split in r.get("per_example", {}) for r in [*arm_runs, *ref_runs]):
    return None
  try:
    iv = paired_bootstrap({r["seed"]: r["per_example"][split] for r in arm_runs},
                          {r["seed"]: r["per_example"][split] for r in ref_runs},
                          arm_name=arm, reference_name=reference).scaled(100)
  except ValueError as e:
    raise DataError(f"{split} outcomes of {arm!r} vs {reference!r}: {e}") from None
  return f"{iv.mean:+.1f} [{iv.low:+.1f}, {iv.high:+.1f}] (n={iv.num_seeds}×{iv.num_examples}, bootstrap", iv.p_value


def seed_table(runs: Sequence[dict[str, Any]], arm: str, metric: str = "strict_solved") -> str:
  """Markdown: one arm's runs, one row per seed (test ``metric`` before → after, its change in points,
  validation before → after, the training-reward rise), and a last row of the mean ± 95% CI of the
  changes over those seeds (points) and the mean reward rise. "n/a": no validation split.

  Raises:
    DataError: ``arm`` has no run in ``runs`` (the arms there named).
  """
  by_seed = {r["seed"]: r for r in runs if r["arm"] == arm}
  if not by_seed:
    raise DataError(f"arm {arm!r} is not in the file (arms there: {sorted({r['arm'] for r in runs})})")
  seeds = sorted(by_seed)
  rs = [by_seed[s] for s in seeds]
  lines = [f"| seed | {metric} before → after (test) | change | validation before → after | training reward rise |",
           "|---|---|---|---|---|"]
  for s, r in zip(seeds, rs):
    val = "n/a" if math.isnan(_val_change(r)) else f"{r['val_before']:.3f} → {_val_after(r):.3f}"
    test = "sealed" if math.isnan(_test_change(r)) else f"{r['test_before']:.3f} → {r['test_after']:.3f}"
    lines.append(f"| {s} | {test} | {_per_seed([_test_change(r)])} | {val} | {r['reward_rise']:+.3f} |")
  rise = sum(r["reward_rise"] for r in rs) / len(rs)
  lines.append(f"| mean ± 95% CI, seeds {_seeds_label(seeds)} (points) | | {_fmt([_test_change(r) for r in rs])} | "
               f"{_fmt([_val_change(r) for r in rs])} | {rise:+.3f} |")
  return "\n".join(lines)


__all__ = ["METRICS", "RL_TIME", "read_variants", "seed_table", "variants_table"]
