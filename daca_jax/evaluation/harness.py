"""The evaluation loop: each task x generation length decoded in fixed batches by the main job's own
decode loop (:func:`daca_jax.evaluation.decode.decode_batches`), resumable, graded by the task, summarised
from the written rows."""
from __future__ import annotations

import dataclasses
import os
import pathlib
import time
from typing import Any, Callable, Sequence

import jax
import numpy as np

from daca_jax.errors import ConfigError, DataError
from daca_jax.evaluation.files import check_fingerprint, finished_rows, jsonable, read_generations, write_rows
from daca_jax.evaluation.model import EvalModel
from daca_jax.io_utils import check_dir_path
from daca_jax.evaluation.protocol import EvalProtocol, PreparedTask, prepare_task
from daca_jax.evaluation.reports import summary_markdown, write_summary
from daca_jax.evaluation.decode import decode_batches
from daca_jax.evaluation.outcomes import write_outcomes
from daca_jax.progress import progress
from daca_jax.tasks.base import Example, Task
from daca_jax.config.rollout import RolloutConfig


def _row_metrics(task: Task, completion: str, example: Example) -> dict[str, float]:
  m = task.metrics([completion], [example])
  return {k: float(v) for k, v in m.items() if k != "num_examples"}


def check_length(prepared: PreparedTask, model: EvalModel, protocol: EvalProtocol,
                 gen_length: int) -> RolloutConfig:
  """The sampler config of ``gen_length`` once it fits the task and the model.

  Raises:
    ConfigError: naming ``--gen_lengths`` (or the protocol flag at fault): a length below the task's
      longest answer (a model of the task's own byte tokenizer, trained on its answer layout; a
      checkpoint's instruction-tuned model is not held to it), beyond the model's context with the
      task's prompts, or not a multiple of the block length.
  """
  name = prepared.task.name
  rcfg = protocol.rollout_config(gen_length)
  if model.tokenizer is None and gen_length < prepared.task.min_gen_length:
    raise ConfigError("--gen_lengths", gen_length,
                      f">= {prepared.task.min_gen_length} for task {name!r} (its longest answer plus EOS)")
  plen = prepared.prompts.shape[1]
  if model.max_seq_len and plen + gen_length > model.max_seq_len:
    raise ConfigError("--gen_lengths", gen_length,
                      f"<= {model.max_seq_len - plen}: the model's context is {model.max_seq_len} tokens "
                      f"and task {name!r} has {plen}-token prompts")
  return rcfg


def evaluate_length(prepared: PreparedTask, model: EvalModel, protocol: EvalProtocol, gen_length: int,
                    out_dir: pathlib.Path, *, max_batches: int | None = None, show_progress: bool = True,
                    log: Callable[[str], None] = print) -> tuple[dict[str, Any] | None, int]:
  """Evaluates one task at one length, appending rows to ``out_dir/gen<L>.jsonl``.

  Args:
    max_batches: stop after decoding this many new batches (None: all); an unfinished length returns
      None and is finished by the next call.
  Returns:
    ``(result, batches decoded by this call)``; ``result`` is :func:`summarize_generations`' dict, or
    None when stopped early by ``max_batches``.
  Raises:
    ConfigError: a length that does not fit the task or the model (``--gen_lengths``), or an
      ``--output_dir`` holding rows made with other settings.
  """
  name = prepared.task.name
  rcfg = check_length(prepared, model, protocol, gen_length)
  plen = prepared.prompts.shape[1]
  out_dir.mkdir(parents=True, exist_ok=True)
  gen_path = out_dir / f"gen{gen_length}.jsonl"
  fingerprint = {"checkpoint": model.identity, "rollout": dataclasses.asdict(rcfg),
                 "batch_size": protocol.batch_size, "seed": protocol.seed, "task": name,
                 "task_options": prepared.options, "prompt_len": int(plen)}
  check_fingerprint(out_dir / f"gen{gen_length}.fingerprint.json", fingerprint, gen_path)
  examples, n, bs = prepared.examples, len(prepared.examples), protocol.batch_size
  done = finished_rows(read_generations(gen_path), examples, bs, gen_path)
  write_rows(gen_path, [done[i] for i in sorted(done)], "w")  # drop rows of half-written batches
  todo = [k for k in range(-(-n // bs)) if k * bs not in done]
  if done:
    log(f"{name} L={gen_length}: {len(done)}/{n} rows already in {gen_path}; {len(todo)} batches to go")
  tok = prepared.tokenizer
  rollout = model.rollout_fn(rcfg, tok.mask_id, tok.eos_id)
  key = jax.random.PRNGKey(protocol.seed)
  now = todo if max_batches is None else todo[:max(max_batches, 0)]
  bar = progress(total=n, desc=f"{name} L={gen_length}", disable=not show_progress)
  bar.update(len(done))
  decoded_batches = decode_batches(rollout, model.params, prepared.prompts, bs, key, batches=now) if now else ()
  for decoded in decoded_batches:
    t0 = time.perf_counter()
    completions = prepared.decode(decoded.ids)
    exs = [examples[i] for i in decoded.rows]
    rewards = np.asarray(prepared.task.reward(completions, exs), np.float32)
    lengths = _completion_tokens(decoded.ids, tok.eos_id)
    seconds = decoded.seconds + time.perf_counter() - t0
    rows = [{"index": int(i), "prompt": ex.prompt, "target": ex.target, "completion": c,
             "reward": float(r), "metrics": _row_metrics(prepared.task, c, ex),
             "completion_tokens": int(nt), "batch": int(decoded.index), "batch_seconds": seconds,
             "decode_seconds": decoded.seconds}
            for i, ex, c, r, nt in zip(decoded.rows, exs, completions, rewards, lengths)]
    write_rows(gen_path, rows, "a")
    bar.update(len(decoded.rows))
  bar.close()
  if len(now) < len(todo):
    return None, len(now)
  return summarize_generations(prepared, gen_path, protocol.batch_size, gen_length), len(todo)


def _completion_tokens(ids: np.ndarray, eos_id: int) -> np.ndarray:
  """Tokens before the first EOS of each row of ``ids [N, L]``."""
  is_eos = ids == eos_id
  return np.where(is_eos.any(-1), is_eos.argmax(-1), ids.shape[1])


def summarize_generations(prepared: PreparedTask, gen_path: pathlib.Path, batch_size: int,
                          gen_length: int) -> dict[str, Any]:
  """The task's metrics recomputed from the completions in ``gen_path`` plus time and throughput; their
  per-example outcomes are written beside it (``gen<L>.outcomes.jsonl``, :mod:`daca_jax.evaluation.outcomes`).

  Raises:
    DataError: the file lacks rows of some evaluated examples.
  """
  done = finished_rows(read_generations(gen_path), prepared.examples, batch_size, gen_path)
  n = len(prepared.examples)
  if len(done) != n:
    raise DataError(f"{gen_path}: {n - len(done)} of {n} examples have no generation yet")
  completions = [done[i]["completion"] for i in range(n)]
  metrics = {k: float(v) for k, v in prepared.task.metrics(completions, prepared.examples).items()}
  write_outcomes(gen_path, prepared.task, completions, prepared.examples)
  batches = {r["batch"]: r for r in done.values()}
  seconds = sum(r["batch_seconds"] for r in batches.values())
  decode = sum(r["decode_seconds"] for r in batches.values())
  return {"metrics": metrics, "num_examples": n, "seconds": seconds, "decode_seconds": decode,
          "tokens_per_s": n * gen_length / decode if decode > 0 else 0.0,
          "mean_completion_tokens": float(np.mean([done[i]["completion_tokens"] for i in range(n)]))}


def run_evaluation(model: EvalModel, task_names: Sequence[str], protocol: EvalProtocol,
                   output_dir: str | os.PathLike, *, max_batches: int | None = None,
                   show_progress: bool = True, log: Callable[[str], None] = print) -> dict[str, Any] | None:
  """Evaluates every task at every length; writes the generations and ``summary.json``/``summary.md``.

  Every task and length is checked (tokenizer fit, lengths, prompt lengths) before any decoding.

  Args:
    max_batches: decode at most this many new batches in this call (all tasks together), then return
      None; rerunning finishes the evaluation (used to test resumption).
  Returns:
    The summary dict written to ``summary.json`` (``checkpoint``, ``protocol``, ``tasks``:
    ``{task: {"source", "primary_metric", "lengths": {str(L): {...}}}}``), or None when stopped by
    ``max_batches``.
  Raises:
    ConfigError / DataError: see :func:`prepare_task` and :func:`evaluate_length`; an ``output_dir``
      that is a file or under one.
  """
  protocol.validate()
  if max_batches is not None and (isinstance(max_batches, bool) or not isinstance(max_batches, int)
                                  or max_batches < 0):
    raise ConfigError("--max_batches", max_batches, "an int >= 0 (or unset: all)")
  if not task_names:
    raise ConfigError("--tasks", list(task_names), "at least one task name")
  out = pathlib.Path(output_dir)
  check_dir_path(out, "--output_dir")  # a file there: refused before any decoding
  prepared = {}
  for name in task_names:
    prepared[name] = p = prepare_task(name, model, protocol.num_examples)
    if "GENERATED" in p.source:
      log(f"WARNING: {name}: evaluating on a generated set, not the benchmark file: {p.source}")
    else:
      log(f"{name}: {p.source}; evaluating {len(p.examples)} examples")
    log(f"{name}: grading: {p.task.grading_rules() or 'not stated by the task'}")
    for length in protocol.gen_lengths:  # every length checked before any decoding
      check_length(p, model, protocol, length)
  summary: dict[str, Any] = {"checkpoint": model.identity, "protocol": jsonable(dataclasses.asdict(protocol)),
                             "tasks": {}}
  left = max_batches
  for name, p in prepared.items():
    entry = {"source": p.source, "primary_metric": p.task.primary_metric,
             "grading_rules": p.task.grading_rules(), "lengths": {}}
    for length in protocol.gen_lengths:
      res, decoded = evaluate_length(p, model, protocol, length, out / name, max_batches=left,
                                     show_progress=show_progress, log=log)
      if left is not None:
        left -= decoded
      if res is None:
        log(f"Stopped after --max_batches={max_batches}; rerun the same command to finish.")
        return None
      entry["lengths"][str(length)] = res
    summary["tasks"][name] = entry
  write_summary(summary, out)
  log("\n" + summary_markdown(summary))
  return summary
