"""The main job's results: ``results.json``, the reward curve, the dashboards' evaluation points and the
before/after table, assembled from the evaluations and the workdir's metrics log."""
from __future__ import annotations

import pathlib
from typing import Any, Callable, NamedTuple

import numpy as np

from daca_jax import io_utils
from daca_jax.run.dashboards import Dashboard
from daca_jax.run.job_eval import JobEvaluator
from daca_jax.run.metrics import format_table, plot_curves, read_metrics, reward_trend
from daca_jax.run.workdir import phase_sink, val_name
from daca_jax.config.train import TrainConfig


class Evaluations(NamedTuple):
  """The job's evaluations: metric name -> value (the task's metrics and ``num_examples``).

  Attributes:
    eval_before, eval_after: the test set before and after RL.
    val_before: the validation split before RL (None without one, or with ``rl.eval_every`` 0); the
      split after RL is read from the metrics log's last ``val/`` record.
  """

  eval_before: dict[str, float]
  eval_after: dict[str, float]
  val_before: dict[str, float] | None


def shape_error(results: Any, *, config: bool = True) -> str | None:
  """What is wrong with a ``results.json``'s value (valid JSON of another shape), or None: the fields
  the reports read (``eval_before`` / ``eval_after`` objects of metric names to numbers and, with
  ``config``, ``config.task.name`` a string and ``config.rl.steps`` an integer)."""
  if not isinstance(results, dict):
    return f"expected a JSON object, found {type(results).__name__}"
  saved = results.get("config")
  needed = (("config.task.name", "task", "name", str, "a string"),
            ("config.rl.steps", "rl", "steps", int, "an integer")) if config else ()
  for field, section_name, name, kind, allowed in needed:
    section = saved.get(section_name) if isinstance(saved, dict) else None
    if not isinstance(section, dict) or name not in section:
      return f"no {field}"
    value = section[name]
    if not isinstance(value, kind) or isinstance(value, bool):
      return f"{field}={value!r} is not {allowed}"
  for field in ("eval_before", "eval_after"):
    evals = results.get(field)
    if not isinstance(evals, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in evals.values()):
      return f"{field}={evals!r} is not an object of metric names to numbers"
  return None


def assemble_results(cfg: TrainConfig, workdir: pathlib.Path, evaluator: JobEvaluator, evals: Evaluations,
                     source: str, timings: dict[str, float],
                     log: Callable[[str], None]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
  """The results dict (see :func:`daca_jax.run.pipeline.run_main_job`) and the metrics log's records.

  ``timings`` holds the phases this invocation ran; those it only loaded from the workdir keep the
  timings of the previous ``results.json`` (a damaged one is rebuilt). Reads, writes nothing.
  """
  previous = io_utils.read_json_cache(workdir / "results.json", log) or {}  # rebuilt below when damaged
  # Keep the timings of phases that this invocation only loaded from cache.
  timings = {**(previous.get("timings") if isinstance(previous.get("timings"), dict) else {}), **timings}
  results = {"eval_before": evals.eval_before, "eval_after": evals.eval_after, "config": cfg.to_dict(),
             "eval_source": source, "timings": timings}
  if evaluator.protocol is not None:  # d1's: what each length decoded, and which one the plain names report
    results["eval_protocol"] = evaluator.describe()
  records = read_metrics(workdir / "metrics.jsonl", log=log) if (workdir / "metrics.jsonl").exists() else []
  # Where each evaluation's per-example outcomes are (file names in the workdir; :mod:`daca_jax.evaluation.outcomes`).
  results["outcomes"] = {"eval_before": evaluator.outcomes_file(workdir / "eval_before.json").name,
                         "eval_after": evaluator.outcomes_file(workdir / "eval_after.json").name}
  if evals.val_before is not None:
    results["val_before"] = evals.val_before
    results["outcomes"]["val_before"] = evaluator.outcomes_file(workdir / "val_before.json").name
    val_points = [r for r in records if any(k.startswith("val/") for k in r)]
    if val_points:
      results["val_after"] = {k[4:]: v for k, v in val_points[-1].items() if k.startswith("val/")}
      results["outcomes"]["val_after"] = evaluator.outcomes_file(workdir / val_name(val_points[-1]["step"])).name
  trend = reward_trend(records)
  if trend:
    results["reward_trend"] = trend
  cos = [r["grad_cos"] for r in records if "grad_cos" in r][1:]  # the first iteration has no predecessor
  if cos:
    c = float(np.mean(cos))
    results["grad_agreement"] = {"mean_cos": c, "snr": c / (1.0 - c) if c < 1.0 else float("inf"),
                                 "iterations": len(cos)}
  return results, records


def publish_results(cfg: TrainConfig, metric: str, workdir: pathlib.Path, results: dict[str, Any],
                    records: list[dict[str, Any]], dashboard: Dashboard | None, log: Callable[[str], None]) -> None:
  """Writes ``results.json`` and ``reward_curve.png`` (the task's primary ``metric`` on the test set
  before and after RL beside the RL curves), sends the evaluations to ``dashboard`` and logs the
  before/after table. Process 0 only."""
  eval_before, eval_after = results["eval_before"], results["eval_after"]
  io_utils.atomic_write_json(workdir / "results.json", results)
  eval_sink = phase_sink(dashboard, "eval", 0)
  if eval_sink is not None:  # the test set before RL at step 0 and after it at the last step
    eval_sink(0, eval_before)
    eval_sink(cfg.rl.steps, eval_after)
    eval_sink.close()
  plot_curves(records, ["reward_mean", "accuracy", f"val/{metric}"], workdir / "reward_curve.png",
              title=f"{cfg.task.name}: {cfg.rl.objective} + credit={cfg.rl.credit}, "
                    f"likelihood={cfg.rl.likelihood}",
              points={f"test {metric} (before / after RL)": [(0, eval_before[metric]),
                                                              (cfg.rl.steps, eval_after[metric])]})
  keys = [k for k in eval_before if k != "num_examples"]
  rows = [[k, eval_before[k], eval_after[k], eval_after[k] - eval_before[k]] for k in keys]
  rows.append(["num_examples", eval_before["num_examples"], eval_after["num_examples"], ""])
  log("\n" + format_table(rows, ["metric", "before RL", "after RL", "change"]))
  if cfg.log.plumbing_check:
    log("(plumbing check: near-zero metrics and changes are expected here; see the note at the start)")
  log(f"Results written to {workdir / 'results.json'}")
  if cfg.log.tensorboard:
    log(f"Dashboards: tensorboard --logdir {workdir}")
