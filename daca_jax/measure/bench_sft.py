"""Benchmark sections from an SFT'd model: ``accuracy`` (Sudoku solved by plain, threshold and cached
greedy decoding) and ``rl_iteration`` (one RL iteration of the config's recipe per training-rollout mode)."""
from __future__ import annotations

import dataclasses
import pathlib
import shutil
import tempfile
import time
from typing import Any

from absl import app
import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.measure import benchmarking as bm
from daca_jax.measure.bench import Bench, BenchOptions, put_ratio
from daca_jax.measure.bench_sampler import fast_variants
from daca_jax.run.metrics import format_table
from daca_jax.config.rollout import RolloutConfig


def _sft_params(bench, res):
  """The SFT'd model's parameters: ``--sft_dir``'s checkpoint (copied), else a short SFT."""
  from daca_jax.run.sft_loop import run_sft

  cfg, task = bench.cfg, bench.task
  with tempfile.TemporaryDirectory() as tmp:
    sft_dir = pathlib.Path(tmp) / "sft"
    steps = cfg.sft.steps
    if bench.opts.sft_dir:
      shutil.copytree(bench.opts.sft_dir, sft_dir)  # never write into someone else's folder
      steps = max(int(s.name) for s in sft_dir.iterdir() if s.name.isdigit())
    else:
      steps = bench.opts.sft_steps
    sft_cfg = dataclasses.replace(cfg, sft=dataclasses.replace(cfg.sft, steps=steps))
    t0 = time.perf_counter()
    params, trained = run_sft(sft_cfg.sft, sft_cfg.checkpoint, task,
                              task.train_examples(cfg.sft.num_train_examples, cfg.seed), bench.logits_fn,
                              bench.params, sft_dir, seed=sft_cfg.seed, gen_length=sft_cfg.rollout.gen_length,
                              show_progress=False)
    res["sft_steps"] = steps
    res["sft_s"] = time.perf_counter() - t0 if trained else 0.0
  return params


def section_accuracy(bench: Bench, res: dict[str, Any]) -> None:
  """Sudoku ``strict_solved`` of plain, threshold and cached greedy decoding with an SFT'd model. Adds its
  figures to ``res``."""
  cfg, task = bench.cfg, bench.task
  params = _sft_params(bench, res)
  examples, source = task.eval_examples()
  examples = examples[:bench.opts.eval_examples]
  res["accuracy_eval_source"] = source
  prompts = task.encode_prompts(examples)
  bs = min(cfg.eval.batch_size, len(examples))
  nb = -(-len(examples) // bs)
  padded = jnp.asarray(np.concatenate([prompts, np.repeat(prompts[-1:], nb * bs - len(examples), 0)]))
  rows = []
  for name, vc, _ in fast_variants(cfg.rollout, bench.opts.threshold, bench.opts.fast_block_length,
                                   bench.opts.fast_variants):
    fn = bench.rollout_fn(vc).lower(params, padded[:bs], bench.key).compile()
    comps, calls, run_s = [], [], 0.0
    for i in range(nb):
      t0 = time.perf_counter()
      traj = jax.block_until_ready(fn(params, padded[i * bs:(i + 1) * bs], bench.key))
      run_s += time.perf_counter() - t0
      comps.append(np.asarray(traj.completion))
      calls.append(int(traj.model_calls))
    completions = task.decode_completions(np.concatenate(comps)[:len(examples)])
    metrics = task.metrics(completions, examples)
    row = {"strict_solved": metrics["strict_solved"], "cell_accuracy": metrics["cell_accuracy"],
           "mean_model_calls": float(np.mean(calls)), "max_calls": vc.steps,
           "tokens_per_s": nb * bs * vc.gen_length / run_s}
    for k, v in row.items():
      res[f"accuracy_{name}_{k}"] = v
    rows.append([name, *row.values()])
  print(format_table(rows, ["greedy variant", "strict_solved", "cell_acc", "mean calls", "max calls",
                            "tokens/s"]))


def rl_modes(opts: BenchOptions) -> list[str]:
  """--rl_modes as a list, d1's sampler ("plain", every ratio's reference) first."""
  modes = [m.strip() for m in opts.rl_modes.split(",") if m.strip()]
  return modes if "plain" in modes else ["plain"] + modes


def section_rl_iteration(bench: Bench, res: dict[str, Any]) -> None:
  """One RL iteration of the config's recipe per training-rollout mode of ``--rl_modes``, from the SFT'd model:
  rollout, update and iteration seconds, model calls, speed-ups over d1's sampler. Adds its figures to
  ``res``."""
  from daca_jax.rl.learner import GRPOLearner
  from daca_jax.rl.downsample import take_rows

  if bench.task is None:
    raise app.UsageError("--sections=rl_iteration needs the config's task (not --model=llada_8b)")
  cfg = bench.cfg
  modes = rl_modes(bench.opts)
  params = _sft_params(bench, res)
  n, g, p = cfg.rl.sample_group_size or cfg.rl.group_size, cfg.rl.group_size, cfg.rl.prompts_per_step
  prompts = jnp.asarray(np.repeat(bench.task.encode_prompts(bench.task.train_examples(p, cfg.seed + 1)), n, 0))
  kept = jnp.asarray((np.arange(p)[:, None] * n + np.arange(g)[None, :]).reshape(-1))  # g of each group
  rewards = jnp.asarray(np.random.default_rng(1).uniform(size=p * g), jnp.float32)
  runners, calls = {}, {}
  for mode in modes:
    c = dataclasses.replace(cfg, rollout=bm.rollout_mode_config(cfg.rollout, mode, bench.opts.threshold))
    learner = GRPOLearner(bench.logits_fn, c, mask_id=bench.mask_id, eos_id=bench.eos_id)
    state = {"opt": learner.init_opt_state(params), "credit": learner.init_credit_state(), "traj": None}

    def rollout(learner=learner, state=state):
      state["traj"] = take_rows(learner.rollout(params, prompts, bench.key), kept)
      return state["traj"]

    def update(learner=learner, state=state):
      credit = learner.assign_credit(state["traj"], rewards, state["credit"])
      weights = credit.weights if credit.token_advantages is None else (credit.weights, credit.token_advantages)
      # The parameters stay the SFT'd ones (every round rolls out the same policy); the donated
      # optimizer state is carried.
      _, state["opt"], metrics = learner.update(params, state["opt"], params, state["traj"], rewards, weights,
                                                bench.key)
      return metrics

    runners[f"{mode}/rollout"], runners[f"{mode}/update"] = rollout, update
    calls[mode] = int(rollout().model_calls)  # compiles; the update compiles in the warm-up below
  times = bm.interleaved_runs(runners, bench.r)
  it = {m: [a + b for a, b in zip(times[f"{m}/rollout"], times[f"{m}/update"])] for m in modes}
  rows = []
  for m in modes:
    roll, upd = (float(np.median(times[f"{m}/{k}"])) for k in ("rollout", "update"))
    speed = bm.ratio_stats(it["plain"], it[m])
    rspeed = bm.ratio_stats(times["plain/rollout"], times[f"{m}/rollout"])
    tag = f"rl_{m.replace('+', '_')}"
    res[f"{tag}_rollout_s"], res[f"{tag}_update_s"], res[f"{tag}_model_calls"] = roll, upd, calls[m]
    put_ratio(res, f"{tag}_rollout_speedup", rspeed)
    put_ratio(res, f"{tag}_iteration_speedup", speed)
    rows.append([m, roll, upd, roll + upd, f"{calls[m]}/{cfg.rollout.steps}", rspeed["median"],
                 f"{speed['median']:.2f} [{speed['min']:.2f}, {speed['max']:.2f}]"])
  res["rl_rollout_rows"], res["rl_update_rows"] = int(prompts.shape[0]), int(kept.shape[0])
  print(format_table(rows, ["training rollout", "rollout s", "update s", "iteration s", "model calls",
                            "rollout speed-up", "iteration speed-up [range]"]))


def check_rl_modes(opts: BenchOptions) -> None:
  """Refuses a bad ``--rl_modes`` before the model is built.

  Raises:
    ConfigError: a mode that is neither 'plain' nor '+'-joined parts
      (:func:`daca_jax.measure.benchmarking.rollout_mode_config`).
  """
  for mode in rl_modes(opts):
    bm.rollout_mode_config(RolloutConfig(), mode, opts.threshold)
