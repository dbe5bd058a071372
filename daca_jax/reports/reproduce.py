"""The reproduction grid: base methods × {base, +DPS, +SML, +DACA} × seeds, with the same number of
rollouts and updates in every arm (the four ablation arms of DACA-GRPO on a base method, arXiv 2605.16342).

Every cell is one main job (:func:`daca_jax.run.pipeline.run_main_job`) in its own folder; cells of the same
task and seed share one cached SFT warm start, so every arm of a seed starts from the same model. A
finished cell (its ``results.json`` exists) is never rerun, so the grid is resumable.
"""
from __future__ import annotations

import dataclasses
import math
import pathlib
import re
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from daca_jax.config import configure
from daca_jax.config.configure import train_config_from_dict, with_overrides  # noqa: F401  (re-exported)
from daca_jax.errors import DataError
from daca_jax.io_utils import read_json, read_json_cache
from daca_jax.run.metrics import read_metrics, reward_trend
from daca_jax.reports.paired import ALPHA, holm, interval_p_value, mean_ci95, p_text
from daca_jax.run import preemption
from daca_jax.run.pipeline import run_main_job
from daca_jax.run.results import shape_error
from daca_jax.config.train import TrainConfig

# The base method's own likelihood estimator: d1 and wd1 use the mean-field estimate, GDPO the ELBO,
# RLDF its rebuilt rollout states.
BASE_LIKELIHOOD = {"diffu_grpo": "mean_field", "wd1": "mean_field", "gdpo": "elbo", "gspo": "mean_field",
                   "reinforce_pp": "mean_field", "rldf": "rldf"}
# Settings a base method brings with it (RLDF: k3-KL β = 0.01).
BASE_RL_OVERRIDES: dict[str, dict[str, Any]] = {"rldf": {"beta": 0.01}}
# The four ablation arms of DACA-GRPO; the related credit methods are further arms on the same base.
ARMS = ("base", "+DPS", "+SML", "+DACA")
RELATED_ARMS = ("+DTCA", "+DelTA")
_ARM_CREDIT = {"base": "uniform", "+DPS": "dps", "+SML": "uniform", "+DACA": "dps", "+DTCA": "dtca",
               "+DelTA": "delta"}


@dataclasses.dataclass(frozen=True)
class Cell:
  """One run of the grid.

  Attributes:
    task, base, arm, seed: the cell's coordinates (``arm`` one of :data:`ARMS` + :data:`RELATED_ARMS`,
      or a name of a study arm).
    overrides: ``((dotted.field, value), ...)`` applied to the task's config instead of
      :func:`arm_methods` (study arms, e.g. ``(("rl.credit", "uniform"), ("rl.likelihood", "trajectory"))``).
    reference: ``(base, arm)`` of the cell this one's paired difference is taken against (same task
      and seed, so the same warm start and prompts); None for a cell that is not paired.
  """

  task: str
  base: str
  arm: str
  seed: int
  overrides: tuple[tuple[str, Any], ...] = ()
  reference: tuple[str, str] | None = None

  @property
  def key(self) -> str:
    arm = re.sub(r"[^A-Za-z0-9.-]+", "_", self.arm.replace("+", " plus ")).strip("_")  # "+DPS" -> plus_DPS
    return f"{self.task}/{self.base}/{arm}/seed{self.seed}"


def arm_methods(base: str, arm: str) -> tuple[str, str]:
  """(credit, likelihood) of an arm: base = (uniform, base estimator), +DPS, +SML, +DACA = both;
  +DTCA / +DelTA = that credit with the base estimator."""
  if arm not in _ARM_CREDIT:
    raise ValueError(f"arm {arm!r} is not one of {list(_ARM_CREDIT)}")
  if base not in BASE_LIKELIHOOD:
    raise ValueError(f"base method {base!r} is not one of {sorted(BASE_LIKELIHOOD)}")
  likelihood = "stratified" if arm in ("+SML", "+DACA") else BASE_LIKELIHOOD[base]
  return _ARM_CREDIT[arm], likelihood


def cell_config(cfg: TrainConfig, cell: Cell) -> TrainConfig:
  if cell.overrides:
    return configure.validate(dataclasses.replace(with_overrides(cfg, cell.overrides), seed=cell.seed))
  credit, likelihood = arm_methods(cell.base, cell.arm)
  rl = dataclasses.replace(cfg.rl, objective=cell.base, credit=credit, likelihood=likelihood,
                           **BASE_RL_OVERRIDES.get(cell.base, {}))
  return configure.validate(dataclasses.replace(cfg, seed=cell.seed, rl=rl))


def grid(tasks: Sequence[str], bases: Sequence[str], seeds: Sequence[int],
         arms: Sequence[str] = ARMS) -> list[Cell]:
  """Cells of ``bases`` × ``arms`` × task × seed; each arm is paired with its own base method's "base"."""
  return [Cell(t, b, a, s, reference=None if a == "base" else (b, "base"))
          for t in tasks for s in seeds for b in bases for a in arms]


def study_grid(tasks: Sequence[str], seeds: Sequence[int], arms: dict[str, Sequence[tuple[str, Any]]],
               references: Mapping[str, str] | None = None) -> list[Cell]:
  """Cells of a study: every named arm (its config overrides) × task × seed.

  Each arm is paired with ``references[arm]`` (another arm of the study, e.g. "spg + SML" with "spg"),
  by default with the arm named "base"; an arm whose reference is not among ``arms`` is not paired.

  Raises:
    ValueError: ``references`` names an arm that is not in ``arms`` as the arm to pair.
  """
  references = dict(references or {})
  unknown = sorted(set(references) - set(arms))
  if unknown:
    raise ValueError(f"references name arms that are not in the study: {unknown}; arms: {list(arms)}")
  base_of = {name: dict(overrides).get("rl.objective", "diffu_grpo") for name, overrides in arms.items()}
  cells = []
  for t in tasks:
    for s in seeds:
      for name, overrides in arms.items():
        ref = references.get(name, "base")
        paired = (base_of[ref], ref) if ref != name and ref in arms else None
        cells.append(Cell(t, base_of[name], name, s, tuple(overrides), paired))
  return cells


def primary_metric(task: str) -> str:
  """The metric a task's rows report (``Task.primary_metric``: strict_solved for sudoku4x4)."""
  from daca_jax.tasks.base import TASKS

  return TASKS.get(task).primary_metric


def run_grid(configs: dict[str, TrainConfig], cells: Sequence[Cell], workdir: str | pathlib.Path, *,
             log: Callable[[str], None] = print, show_progress: bool = False,
             run_missing: bool = True, jobs: int = 1) -> dict[str, dict[str, Any]]:
  """Runs every unfinished cell; returns ``{cell.key: results}`` for all cells.

  Args:
    configs: the base config of each task (``cell.task`` → TrainConfig); the key is the config's
      ``task.name``.
    run_missing: False: run nothing, return only the finished cells.
    jobs: cells run at once. 1: one after the other in this process; more: each in a process of its own
      (:mod:`daca_jax.reports.grid_pool`; a task and seed's first cell trains the shared warm start
      before the others of that seed start). A cell's results do not depend on ``jobs``.

  A SIGTERM within :func:`~daca_jax.run.preemption.watching` (``experiments/reproduce.py`` enters it)
  stops the grid: the running cell saves its step and raises :class:`~daca_jax.run.preemption.Preempted`,
  or, when it had no step left, the next cell does not start (:class:`~daca_jax.run.preemption.GridPreempted`);
  with ``jobs`` > 1, see :mod:`daca_jax.reports.grid_pool`. Rerunning resumes every cell.

  Raises:
    ValueError: ``jobs`` < 1.
    Preempted: stopped by a SIGTERM (above); exit status 75 in the scripts.
  """
  if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
    raise ValueError(f"jobs={jobs!r}: expected an integer >= 1 (cells run at once)")
  workdir = pathlib.Path(workdir)
  out, missing = {}, []
  for i, cell in enumerate(cells):
    cdir = workdir / "cells" / cell.key
    res_path = cdir / "results.json"
    cached = read_json_cache(res_path, log)  # a damaged one is rebuilt by rerunning the cell
    wrong = None if cached is None else shape_error(cached, config=False)
    if wrong:  # valid JSON of another shape is damaged too: rebuilt, never read as results
      log(f"WARNING: {res_path} is damaged ({wrong}); recomputing it.")
      cached = None
    if cached is not None:
      if "reward_trend" not in cached and (cdir / "metrics.jsonl").exists():  # a run from before the field
        cached["reward_trend"] = reward_trend(read_metrics(cdir / "metrics.jsonl", log=log))
      out[cell.key] = cached
    elif run_missing:
      missing.append((i, cell))
  if not missing:
    return out

  def args(cell: Cell) -> tuple[Any, ...]:
    return (cell_config(configs[cell.task], cell), workdir / "cells" / cell.key,
            workdir / "sft_cache" / f"{cell.task}_seed{cell.seed}", show_progress and jobs == 1)

  def done(index: int, cell: Cell, result: dict[str, Any], seconds: float) -> None:
    out[cell.key] = result
    metric = primary_metric(cell.task)
    log(f"[{index + 1}/{len(cells)}] {cell.key}: {metric} {result['eval_after'][metric]:.3f} ({seconds:.0f} s)")

  if jobs == 1:
    for n, (i, cell) in enumerate(missing):
      if preemption.signals_received():  # arrived after the last cell's last step boundary
        raise preemption.GridPreempted([], len(missing) - n)
      done(i, cell, *run_cell(*args(cell)))
    return out
  from daca_jax.reports import grid_pool  # noqa: PLC0415  (process pools only when asked for)
  where = {cell.key: (i, cell) for i, cell in missing}
  grid_pool.run_jobs([grid_pool.Job(c.key, (c.task, c.seed), args(c)) for _, c in missing], run_cell, jobs,
                     on_done=lambda job, res: done(*where[job.key], *res))
  return out


def run_cell(cfg: TrainConfig, cdir: pathlib.Path, sft_dir: pathlib.Path,
             show_progress: bool = False) -> tuple[dict[str, Any], float]:
  """One cell's main job in ``cdir`` from the warm start cached in ``sft_dir``; returns its results
  and the seconds it took (a module-level function: a worker process of ``run_grid(jobs=N)`` runs it)."""
  t0 = time.perf_counter()
  results = run_main_job(cfg, cdir, show_progress=show_progress, log=lambda *a, **k: None, sft_dir=sft_dir)
  return results, time.perf_counter() - t0


def read_results(path: str | pathlib.Path) -> dict[str, Any]:
  """A grid's ``results.json`` (as ``experiments/reproduce.py`` writes it): ``rows``, and ``cells`` by key.

  Raises:
    FileNotFoundError: no such file.
    DataError: the file is not JSON or not a grid's results (no ``rows`` list, ``cells`` not an object); the
      file named.
  """
  fix = "give a grid's results.json (experiments/reproduce.py --workdir=DIR writes DIR/results.json)"
  data = read_json(path, fix=fix, kind=None)
  if not isinstance(data, dict) or not isinstance(data.get("rows"), list) or not isinstance(data.get("cells", {}),
                                                                                            dict):
    raise DataError(f"{path}: not a grid's results.json (expected an object with a 'rows' list and a 'cells' "
                    f"object); {fix}")
  return data


def read_rows(path: str | pathlib.Path) -> list[dict[str, Any]]:
  """The summary rows of a grid's ``results.json`` (:func:`read_results`; its errors)."""
  return read_results(path)["rows"]


def summarize(cells: Sequence[Cell], results: dict[str, dict[str, Any]],
              metric: str | None = None) -> list[dict[str, Any]]:
  """One row per (task, base, arm): mean and 95% CI over seeds of ``eval_after[metric]`` and of its
  change from the shared warm start, plus the per-seed values. ``metric`` None: each task's
  :func:`primary_metric`."""
  rows = []
  groups: dict[tuple[str, str, str], list[Cell]] = {}
  for c in cells:
    groups.setdefault((c.task, c.base, c.arm), []).append(c)
  for (task, base, arm), cs in groups.items():
    name = primary_metric(task) if metric is None else metric
    after = [results[c.key]["eval_after"][name] for c in cs]
    delta = [results[c.key]["eval_after"][name] - results[c.key]["eval_before"][name] for c in cs]
    m, ci = mean_ci95(after)
    dm, dci = mean_ci95(delta)
    row = {"task": task, "metric": name, "base": base, "arm": arm, "mean": m, "ci95": ci,
           "delta_mean": dm, "delta_ci95": dci, "seeds": [c.seed for c in cs], "values": after}
    # The validation split (chosen-on) and the training-reward trend, where the runs recorded them.
    val = [results[c.key]["val_after"][name] - results[c.key]["val_before"][name] for c in cs
           if name in results[c.key].get("val_after", {}) and name in results[c.key].get("val_before", {})]
    if len(val) == len(cs):
      row["val_delta_mean"], row["val_delta_ci95"] = mean_ci95(val)
    trend = [results[c.key]["reward_trend"] for c in cs if "reward_trend" in results[c.key]]
    if len(trend) == len(cs):
      row["reward_rise"] = [t["last_mean"] - t["first_mean"] for t in trend]
    # Paired with the reference cell of the same task and seed (same warm start, same prompts).
    reference = cs[0].reference
    ref_cells = {c.seed: c for c in groups.get((task, *reference), [])} if reference else {}
    pairs = [results[c.key]["eval_after"][name] - results[ref_cells[c.seed].key]["eval_after"][name]
             for c in cs if c.seed in ref_cells]
    if pairs:
      row["vs_base_mean"], row["vs_base_ci95"] = mean_ci95(pairs)
      row["vs_base_n"] = len(pairs)
      row["reference"] = reference[1]
    rows.append(row)
  return rows


def paired_p_values(rows: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[float],
                                                                 dict[tuple[str, str], list[int]]]:
  """Each row's paired comparison's p-value (Student t over seeds, from its interval) and its Holm-adjusted
  p-value over its family (the rows of the same task and metric); NaN for a row without one. Also the
  families: ``{(task, metric): [row index, ...]}``."""
  raw = [interval_p_value(r["vs_base_mean"], r["vs_base_ci95"], r.get("vs_base_n", len(r["seeds"])))
         if "vs_base_mean" in r else math.nan for r in rows]
  adjusted, families = [math.nan] * len(rows), {}
  for i, r in enumerate(rows):
    families.setdefault((r["task"], r["metric"]), []).append(i)
  for members in families.values():
    for i, q in zip(members, holm([raw[i] for i in members])):
      adjusted[i] = q
  return raw, adjusted, families


def markdown(rows: Sequence[dict[str, Any]]) -> str:
  """The grid as a table; "arm − base" is the paired difference (same seed and warm start) with its
  95% CI, its p-value and its Holm-adjusted p-value over the table's paired comparisons of the same task
  and metric (one family: :func:`daca_jax.reports.paired.holm`), marked "**separates**" when the adjusted
  p-value is below 0.05 (the column is "arm − reference" and names the reference where an arm is paired
  with another arm than "base"). Rows that recorded a validation split and a reward trend add their
  columns: the validation change (what arms are chosen on) and each seed's training-reward rise (mean of
  the last 20 iterations minus the first 20)."""
  extra = any("val_delta_mean" in r for r in rows)
  other = any(r.get("reference", "base") != "base" for r in rows)
  raw, adjusted, families = paired_p_values(rows)
  sizes = {k: sum(not math.isnan(raw[i]) for i in v) for k, v in families.items()}
  family = ", ".join(f"{n} on {t}" for (t, _), n in sizes.items() if n)
  head = ["task", "metric", "base", "arm", "after RL (mean ± 95% CI)", "change vs warm start",
          f"arm − {'reference' if other else 'base'} (paired; Holm over {family or 'none'})"] + (
              ["validation change", "reward rise per seed"] if extra else []) + ["seeds"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for i, r in enumerate(rows):
    paired = ""
    if "vs_base_mean" in r:
      m, ci = r["vs_base_mean"], r["vs_base_ci95"]
      paired = f"{m:+.3f} ± {ci:.3f}"
      if not math.isnan(raw[i]):
        paired += f" (p {p_text(raw[i])}, Holm {p_text(adjusted[i])}" + ("; **separates**" if adjusted[i] < ALPHA else "") + ")"
      paired += f" vs {r['reference']}" if other else ""
    cells = [r["task"], r["metric"], r["base"], r["arm"], f"{r['mean']:.3f} ± {r['ci95']:.3f}",
             f"{r['delta_mean']:+.3f} ± {r['delta_ci95']:.3f}", paired]
    if extra:
      cells.append(f"{r['val_delta_mean']:+.3f} ± {r['val_delta_ci95']:.3f}" if "val_delta_mean" in r else "")
      cells.append(" / ".join(f"{x:+.3f}" for x in r.get("reward_rise", [])))
    cells.append(str(len(r["seeds"])))
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], png_path: str | pathlib.Path) -> None:
  """Grouped bar chart: one group per (task, base), one bar per arm: the change from the shared warm
  start (points of the primary metric; seeds' warm starts differ, the change is paired), 95% CI error
  bars (cut at the axis limits when two seeds make them wider than the data)."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  groups = list(dict.fromkeys((r["task"], r["base"]) for r in rows))
  arms = list(dict.fromkeys(r["arm"] for r in rows))
  fig = Figure(figsize=(max(6, 2.2 * len(groups)), 4))
  FigureCanvasAgg(fig)
  ax = fig.add_subplot(1, 1, 1)
  width = 0.8 / max(len(arms), 1)
  for j, arm in enumerate(arms):
    vals, errs = [], []
    for g in groups:
      r = next((r for r in rows if (r["task"], r["base"]) == g and r["arm"] == arm), None)
      vals.append(100 * r["delta_mean"] if r else np.nan)
      errs.append(0.0 if r is None or math.isnan(r["delta_ci95"]) else 100 * r["delta_ci95"])
    ax.bar(np.arange(len(groups)) + (j - (len(arms) - 1) / 2) * width, vals, width, yerr=errs, capsize=3,
           label=arm)
  ax.set_xticks(np.arange(len(groups)))
  metric_of = {r["task"]: r["metric"] for r in rows}
  ax.set_xticklabels([f"{t} ({metric_of[t]})\n{b}" for t, b in groups])
  ax.axhline(0.0, color="black", linewidth=0.8)
  span = [100 * r["delta_mean"] for r in rows if not math.isnan(r["delta_mean"])]
  if span:  # limits from the means, so a two-seed interval does not flatten the bars
    lo, hi = min(min(span), 0.0), max(max(span), 0.0)
    pad = max(5.0, 0.5 * (hi - lo))
    ax.set_ylim(lo - pad, hi + pad)
  ax.set_ylabel("change from the warm start (points)")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(png_path, dpi=110)


# The presets fix every RL option that sets their budget and schedule (and SML's partition), so that a
# task config's own recipe (e.g. the main job's down-sampling, cosine decay and commit-order strata)
# does not change what a grid measured.
_PRESET_RL = dict(sample_group_size=0, learning_rate=1e-4, lr_schedule="constant", num_iterations=1, advantage="")


def _pinned_likelihood(cfg: TrainConfig) -> Any:
  """SML with its default random strata, whatever partition the task config's main job uses."""
  return dataclasses.replace(cfg.likelihood, stratified=dataclasses.replace(cfg.likelihood.stratified,
                                                                            partition="random"))


def quick_preset(cfg: TrainConfig) -> TrainConfig:
  """≤ 20 min on 2 CPU cores for 3 bases × 4 arms × 3 seeds: 12 RL iterations of 4 puzzles × 8, eval on
  the first 100 puzzles. A smoke test of the grid, far too short to separate the arms."""
  return dataclasses.replace(
      cfg,
      rl=dataclasses.replace(cfg.rl, steps=12, prompts_per_step=4, group_size=8, **_PRESET_RL),
      likelihood=_pinned_likelihood(cfg),
      task=dataclasses.replace(cfg.task, num_eval_examples=100),
      eval=dataclasses.replace(cfg.eval, batch_size=100),
      checkpoint=dataclasses.replace(cfg.checkpoint, every=12)).validate()


def study_preset(cfg: TrainConfig) -> TrainConfig:
  """The credit study's budget (``docs/results/credit_study.json``): 100 RL iterations of 32 prompts ×
  G = 4 (128 rollouts per update; 64 per update left the batch gradients nearly orthogonal), r − mean
  advantages, a constant 1e-4, SML's random strata, evaluated on the full evaluation set. About 5 min
  per mean-field cell and 10-12 min per cell that rebuilds the trajectory or scores K strata (one core)."""
  return dataclasses.replace(
      cfg,
      # With a validation split, evaluate it every 20 iterations (val_after, the last point, is what
      # arms are chosen on; the curve tells a trend from the swings).
      rl=dataclasses.replace(cfg.rl, steps=100, prompts_per_step=32, group_size=4, **_PRESET_RL,
                             eval_every=20 if cfg.task.num_val_examples else 0),
      likelihood=_pinned_likelihood(cfg)).validate()


def standard_preset(cfg: TrainConfig) -> TrainConfig:
  """Each task config's own recipe, the budget at which its base arms learn, chosen on that task's
  validation split (4x4 Sudoku: the main job's 200 iterations of 32 puzzles × 4 of 8, std advantages,
  cosine decay from 2e-4, SML strata in commit order; Countdown: 150 iterations of 8 × 8 at a constant
  1e-4); only the arm's objective, credit and likelihood change. The validation split, where the task
  has one, is evaluated every 25 iterations if the config does not already say how often. Sudoku,
  one core per cell, two cells at a time: 9-13 min per mean-field or ELBO cell, 18-20 min per SML cell;
  Countdown: 2-5 min."""
  if cfg.task.num_val_examples and not cfg.rl.eval_every:
    cfg = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, eval_every=25))
  return cfg.validate()


# Validation items of the pre-registered comparisons (docs/results/credit_preregistration.md): with
# 10 warm starts, 5,000 items make the examples' share of a paired difference's spread small beside the
# warm starts' (a 0/1 outcome's binomial SE is <= 0.7 points per arm at this size).
STUDY_VAL_EXAMPLES = 5000


def credit_preset(cfg: TrainConfig) -> TrainConfig:
  """The pre-registered credit comparison (``docs/results/credit_preregistration.md``): each task
  config's own recipe (:func:`standard_preset`'s), validated on a fixed generated split of
  :data:`STUDY_VAL_EXAMPLES` items (``task.val_split="fixed"``: the same items for every warm start,
  held out of every training pool; a larger ``task.num_val_examples`` is kept), evaluated before RL
  and once after it (``rl.eval_every = rl.steps``: a pass over 5,000 items costs minutes)."""
  task = dataclasses.replace(cfg.task, val_split="fixed",
                             num_val_examples=max(cfg.task.num_val_examples, STUDY_VAL_EXAMPLES))
  return dataclasses.replace(cfg, task=task, rl=dataclasses.replace(cfg.rl, eval_every=cfg.rl.steps)).validate()


PRESETS: dict[str, Callable[[TrainConfig], TrainConfig]] = {
    "quick": quick_preset, "study": study_preset, "standard": standard_preset, "credit": credit_preset,
    "full": lambda cfg: cfg}
