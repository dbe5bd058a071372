"""Run comparison: the logic of ``experiments/compare.py``.

Inputs are workdirs of ``experiments/train.py`` (``metrics.jsonl``, ``results.json``) and reproduce
grids (``experiments/reproduce.py``: ``<grid>/cells/<task>/<base>/<arm>/seed<N>/``). Runs are grouped by
name modulo seed: a workdir named ``dps_s0`` / ``dps-seed1`` joins group ``dps`` with seed 0 / 1, a grid
cell joins group ``<task>/<base>/<arm>``. Curves are the group mean over seeds with the min–max band
over seeds; the table gives each group's final metrics (mean ± 95% Student-t CI over seeds) and the
difference of each group from the first one, paired by seed (same seed = same warm start and prompts
in the reproduce grid) where the groups share seeds.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import re
from typing import Any, Sequence

import numpy as np

from daca_jax.errors import DataError
from daca_jax.io_utils import read_json
from daca_jax.run.metrics import format_table, read_metrics
from daca_jax.run.results import shape_error
from daca_jax.reports.reproduce import mean_ci95, primary_metric

_SEED = re.compile(r"^(?P<name>.*?)[_-]?(?:seed|s)(?P<seed>\d+)$")
# Iterations averaged for the "final" training metrics (one rollout batch is noisy).
FINAL_WINDOW = 10
CURVE_KEYS = ("reward_mean", "kl")


@dataclasses.dataclass
class Run:
  """One workdir: its group name, seed, metrics records and results (None before it finished)."""

  name: str
  seed: int | None
  path: pathlib.Path
  records: list[dict[str, Any]]
  results: dict[str, Any] | None

  @property
  def metric(self) -> str | None:
    """The task's primary metric (from the run's config), or None without results."""
    if not self.results:
      return None
    try:
      return primary_metric(self.results["config"]["task"]["name"])
    except Exception:  # an unknown task of a newer version: fall back to the first metric
      return next((k for k in self.results.get("eval_after", {}) if k != "num_examples"), None)


def split_seed(name: str) -> tuple[str, int | None]:
  """``"dps_s0"`` -> ``("dps", 0)``, ``"seed3"`` -> ``("seed3", 3)``, ``"dps"`` -> ``("dps", None)``."""
  m = _SEED.match(name)
  if not m:
    return name, None
  return (m.group("name") or name), int(m.group("seed"))


def _load(path: pathlib.Path, name: str, seed: int | None) -> Run:
  metrics = path / "metrics.jsonl"
  records = read_metrics(metrics, log=lambda *_: None) if metrics.exists() else []
  return Run(name, seed, path, records, read_results(path / "results.json"))


_RESULTS_FIX = ("rerun the same experiments/train.py command (it rebuilds results.json from the run's "
                "checkpoints), or leave this run out")


def read_results(path: pathlib.Path) -> dict[str, Any] | None:
  """A finished run's ``results.json`` with the fields the comparison reads checked: None when the
  run has none (not finished).

  Raises:
    DataError: not JSON, or valid JSON of another shape (the file and the field named): ``config``
      without ``task.name`` (a string) and ``rl.steps`` (an integer), or an ``eval_before`` /
      ``eval_after`` that is not an object of numbers.
  """
  if not path.exists():
    return None
  results = read_json(path, fix=_RESULTS_FIX)
  wrong = shape_error(results)
  if wrong:
    raise DataError(f"{path}: {wrong}; {_RESULTS_FIX}")
  return results


def discover(paths: Sequence[str | os.PathLike]) -> list[Run]:
  """The runs named by ``paths`` (workdirs and reproduce grids), in order.

  Raises:
    DataError: a path that is neither (names it and what was expected).
  """
  runs = []
  for p in map(pathlib.Path, paths):
    if (p / "cells").is_dir():
      cells = sorted({q.parent for pattern in ("metrics.jsonl", "results.json")
                      for q in (p / "cells").glob(f"**/{pattern}")})
      if not cells:
        raise DataError(f"{p}: a reproduce grid without finished cells (nothing under {p / 'cells'})")
      for c in cells:
        name, seed = split_seed(c.name)
        rel = c.parent.relative_to(p / "cells").as_posix() if seed is not None else c.relative_to(p / "cells").as_posix()
        runs.append(_load(c, rel.replace("plus_", "+"), seed))
    elif (p / "metrics.jsonl").exists() or (p / "results.json").exists():
      name, seed = split_seed(p.resolve().name)
      runs.append(_load(p, name, seed))
    else:
      raise DataError(f"{p}: neither a workdir of experiments/train.py (metrics.jsonl / results.json) nor a "
                      "reproduce grid (cells/)")
  return runs


def group(runs: Sequence[Run]) -> dict[str, list[Run]]:
  """Runs by name, in first-seen order. Two runs of one name and seed (the same run given twice, or
  seedless runs of one name) are told apart by their paths' parent folders."""
  out: dict[str, list[Run]] = {}
  for r in runs:
    out.setdefault(r.name, []).append(r)
  for name, rs in list(out.items()):
    seeds = [r.seed for r in rs]
    if len(set(seeds)) < len(seeds):  # e.g. runs/a/dps and runs/b/dps: separate groups
      del out[name]
      for r in rs:
        out.setdefault(f"{r.path.parent.name}/{r.name}", []).append(r)
  return out


def series(run: Run, key: str) -> tuple[np.ndarray, np.ndarray]:
  """(steps, values) of ``key`` in a run's records; ``"test:<metric>"`` is the test set before RL
  (step 0) and after RL (its last step), from ``results.json``."""
  if key.startswith("test:"):
    metric = key[5:]
    pts = []
    if run.results and metric in run.results.get("eval_after", {}):
      pts = [(0, run.results["eval_before"][metric]),
             (int(run.results["config"]["rl"]["steps"]), run.results["eval_after"][metric])]
  else:
    pts = [(r["step"], r[key]) for r in run.records if isinstance(r.get(key), (int, float))]
  pts = sorted(dict(pts).items())
  return np.array([p[0] for p in pts], np.int64), np.array([p[1] for p in pts], np.float64)


def band(runs: Sequence[Run], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """(steps, mean, min, max) over the runs at the steps every run has."""
  curves = [series(r, key) for r in runs]
  steps = sorted(set.intersection(*(set(s.tolist()) for s, _ in curves))) if curves else []
  if not steps:
    return (np.zeros(0, np.int64),) + (np.zeros(0),) * 3
  vals = np.array([[dict(zip(s.tolist(), v))[t] for t in steps] for s, v in curves])
  return np.array(steps), vals.mean(0), vals.min(0), vals.max(0)


def final_metrics(run: Run) -> dict[str, float]:
  """A run's final numbers: every test metric after RL (``test/<name>``) and the mean of the last
  :data:`FINAL_WINDOW` iterations of reward and KL."""
  out = {}
  if run.results:
    out.update({f"test/{k}": float(v) for k, v in run.results["eval_after"].items()
                if k != "num_examples" and isinstance(v, (int, float))})
  for key in CURVE_KEYS:
    _, v = series(run, key)
    if len(v):
      out[f"{key} (last {min(FINAL_WINDOW, len(v))})"] = float(np.mean(v[-FINAL_WINDOW:]))
  return out


def _fmt(values: Sequence[float]) -> str:
  if not values:
    return "—"
  m, ci = mean_ci95(values)
  return f"{m:.4f}" if len(values) == 1 else f"{m:.4f} ± {ci:.4f} (n={len(values)})"


def _diff(ref: list[Run], other: list[Run], metric: str) -> str:
  """other − ref for ``metric``: paired by seed when they share seeds, else of the means (unpaired)."""
  def vals(rs):
    return {r.seed: final_metrics(r)[metric] for r in rs if metric in final_metrics(r)}

  a, b = vals(ref), vals(other)
  shared = [s for s in b if s in a and s is not None]
  if shared:
    d = [b[s] - a[s] for s in shared]
    m, ci = mean_ci95(d)
    return f"{m:+.4f}" + ("" if len(d) == 1 else f" ± {ci:.4f} (paired, n={len(d)})")
  if a and b:
    return f"{np.mean(list(b.values())) - np.mean(list(a.values())):+.4f}" + (
        " (unpaired)" if len(a) > 1 or len(b) > 1 else "")
  return "—"


def table(groups: dict[str, list[Run]]) -> str:
  """The final-metrics table: one column per group, then ``<group> − <first group>`` columns."""
  names = list(groups)
  metrics = list(dict.fromkeys(k for rs in groups.values() for r in rs for k in final_metrics(r)))
  headers = ["metric"] + names + [f"{n} − {names[0]}" for n in names[1:]]
  rows = []
  for m in metrics:
    cells = [_fmt([final_metrics(r)[m] for r in rs if m in final_metrics(r)]) for rs in groups.values()]
    rows.append([m] + cells + [_diff(groups[names[0]], groups[n], m) for n in names[1:]])
  return format_table(rows, headers)


def plot(groups: dict[str, list[Run]], png_path: str | os.PathLike) -> None:
  """Reward, KL and evaluation curves of every group (mean line, min–max band over seeds); the
  evaluation panel shows the validation points as a line and the test set before / after RL as
  diamonds on the same iteration axis."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  metric = next((r.metric for rs in groups.values() for r in rs if r.metric), None)
  panels = [("reward_mean", "mean rollout reward", None), ("kl", "KL to the reference", None)]
  if metric:
    panels.append((f"val/{metric}", f"{metric} (line: validation, ◆: test)", f"test:{metric}"))
  fig = Figure(figsize=(4.3 * len(panels), 3.9), dpi=100, layout="constrained")
  FigureCanvasAgg(fig)
  axes = fig.subplots(1, len(panels), squeeze=False)[0]
  for ax, (key, title, points) in zip(axes, panels):
    for i, (name, rs) in enumerate(groups.items()):
      colour = f"C{i % 10}"
      label = name if len(rs) == 1 else f"{name} (mean; band: min–max of {len(rs)} seeds)"
      steps, mean, lo, hi = band(rs, key)
      if len(steps):
        ax.plot(steps, mean, color=colour, marker="o" if len(steps) < 30 else None, markersize=3, label=label)
        if len(rs) > 1:
          ax.fill_between(steps, lo, hi, color=colour, alpha=0.2, linewidth=0)
      if points:
        steps, mean, lo, hi = band(rs, points)
        if len(steps):
          ax.errorbar(steps, mean, yerr=[mean - lo, hi - mean], color=colour, marker="D", linestyle="none",
                      markersize=6, capsize=3)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("RL iteration")
    ax.set_ylabel(key)
    ax.grid(True, alpha=0.3)
  handles, labels = axes[0].get_legend_handles_labels()
  if handles:
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(handles), 3), fontsize=8)
  path = os.fspath(png_path)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, format="png")


def compare(paths: Sequence[str | os.PathLike], png_path: str | os.PathLike | None = None) -> str:
  """Groups the runs of ``paths``, writes the curves to ``png_path`` (if given) and returns the table.

  Raises:
    DataError: a path that is not a run or grid, or fewer than one run.
  """
  runs = discover(paths)
  if not runs:
    raise DataError("no runs to compare")
  groups = group(runs)
  if png_path is not None:
    plot(groups, png_path)
  return table(groups)
