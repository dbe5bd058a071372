"""Benchmark sections of the update: ``likelihood`` (SML against mean-field: log-prob and update time,
compiled peak memory), ``memory`` (SML's scratch memory at V=32k), ``scaling`` (rollout vs L, SML vs K,
update vs G) and ``costs`` (every method's compiled FLOPs, :mod:`daca_jax.measure.method_costs`)."""
from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.likelihood import LIKELIHOOD
from daca_jax.measure import benchmarking as bm
from daca_jax.measure.bench import Bench, put_ratio
from daca_jax.models import init_model, make_logits_fn


def _learner(bench, likelihood, k, group_size=None, prompts_per_step=None, strata_batch=None):
  from daca_jax.rl.learner import GRPOLearner

  cfg = bench.cfg
  rl = dataclasses.replace(cfg.rl, likelihood=likelihood, group_size=group_size or cfg.rl.group_size,
                           prompts_per_step=prompts_per_step or cfg.rl.prompts_per_step)
  lc = dataclasses.replace(cfg.likelihood, stratified=dataclasses.replace(cfg.likelihood.stratified, num_strata=k))
  if strata_batch is not None:
    lc = dataclasses.replace(lc, strata_batch=strata_batch)
  c = dataclasses.replace(cfg, rl=rl, likelihood=lc)
  return GRPOLearner(bench.logits_fn, c, mask_id=bench.mask_id, eos_id=bench.eos_id)


def _tile_batch(traj, reps):
  """The rollout batch repeated ``reps`` times (groups stay adjacent): as many sequences as the K
  passes of SML feed the model."""
  b = traj.tokens.shape[0]
  return jax.tree.map(lambda a: jnp.tile(a, (reps,) + (1,) * (a.ndim - 1))
                      if getattr(a, "ndim", 0) >= 1 and a.shape[0] == b else a, traj)


def _update_time(bench, learner, traj, repeats):
  """Compile time, best time and a zero-argument runner of one update step. The update donates its
  optimizer state, so each call feeds the state the previous call returned."""
  b = traj.tokens.shape[0]
  rewards = jnp.asarray(np.random.default_rng(1).uniform(size=b), jnp.float32)
  args = (bench.params, learner.init_opt_state(bench.params), bench.params, traj, rewards,
          traj.completion_mask, bench.key)
  t0 = time.perf_counter()
  compiled = learner.update.lower(*args).compile()
  compile_s = time.perf_counter() - t0
  memory = bm.memory_stats(compiled)
  state = {"opt": args[1]}

  def run():
    _, state["opt"], metrics = compiled(args[0], state["opt"], *args[2:])
    return metrics

  out = bm.time_fn(run, repeats=repeats)
  out.update(compile_s=compile_s, run=run, memory=memory)
  return out


def _logprob_time(bench, learner, traj, repeats):
  fn = jax.jit(learner.logprobs)
  return bm.compile_and_time(fn, bench.params, traj, bench.key, repeats=repeats)


def section_likelihood(bench: Bench, res: dict[str, Any]) -> None:
  """SML (K=4) against mean-field: log-prob and update time, compiled peak memory and compile time; SML with
  ``strata_batch=1``; mean-field on a 4x batch (the model work of SML's four passes). Adds its figures to
  ``res``."""
  # SML's K passes are K times the batch through the model, so next to mean-field it is timed against
  # mean-field on a K-times-larger batch (the same model work): on a CPU the wall time grows faster
  # than the batch once activations outgrow the caches, which no estimator can avoid. strata_batch=1
  # keeps one pass's activations (rematerialised, one more forward per pass in the backward).
  traj = bench.rollout_fn(bench.cfg.rollout)(bench.params, bench.prompts, bench.key)
  k = 4
  runs = {}
  variants = (("mean_field", "mean_field", 1, None, traj), ("stratified", "stratified", k, 0, traj),
              ("stratified_strata_batch1", "stratified", k, 1, traj),
              (f"mean_field_{k}x_batch", "mean_field", 1, None, _tile_batch(traj, k)))
  for label, name, kk, sb, tr in variants:
    learner = _learner(bench, name, kk, strata_batch=sb)
    if tr is traj and sb != 1:
      lp = _logprob_time(bench, learner, traj, 1)
      runs[f"{label}_logprob"] = functools.partial(lp["compiled"], bench.params, traj, bench.key)
    upd = _update_time(bench, learner, tr, 1)
    res[f"{label}_update_compile_s"] = upd["compile_s"]
    res[f"{label}_update_compiled_peak_mb"] = upd["memory"]["peak_bytes"] / 2**20
    runs[f"{label}_update"] = upd["run"]
  times = bm.interleaved_runs(runs, bench.r)  # interleaved: the ratios see the same machine load
  for name, t in times.items():
    res[f"{name}_s"] = min(t)
  put_ratio(res, "sml_k4_vs_mean_field_update_ratio", bm.ratio_stats(times["stratified_update"],
                                                                      times["mean_field_update"]))
  mf = res["mean_field_update_s"]
  res["sml_k4_vs_mean_field_logprob_ratio"] = res["stratified_logprob_s"] / res["mean_field_logprob_s"]
  res["sml_k4_strata_batch1_vs_mean_field_update_ratio"] = res["stratified_strata_batch1_update_s"] / mf
  res[f"mean_field_{k}x_batch_vs_mean_field_update_ratio"] = res[f"mean_field_{k}x_batch_update_s"] / mf
  res[f"sml_k4_vs_mean_field_{k}x_batch_update_ratio"] = (res["stratified_update_s"]
                                                         / res[f"mean_field_{k}x_batch_update_s"])


def section_memory(bench: Bench, res: dict[str, Any]) -> None:
  """Compiled scratch memory of SML at V=32k: all strata at once against one at a time. Adds its figures to
  ``res``."""
  # Peak memory of SML with a 32k vocabulary: all K strata at once (vmap) vs one stratum at a time
  # (lax.map, likelihood.strata_batch=1); XLA's compiled scratch size, no execution needed.
  cfg = bench.cfg
  big = dataclasses.replace(cfg.model, vocab_size=32768, d_model=64, n_layers=1, n_heads=2, n_kv_heads=0,
                            mlp_dim=128, mask_token_id=32767, dtype="float32", param_dtype="float32")
  gd_big, params_big = init_model(big, 0)
  big_fn = make_logits_fn(gd_big)
  toks = jnp.zeros((8, 64), jnp.int32)
  # A left-to-right commit order of the 32 completion positions, two per step (commit-order strata read it).
  commit_step = jnp.broadcast_to(jnp.arange(32, dtype=jnp.int32) // 2, (8, 32))
  sml = lambda sb: (lambda prm, t, kk: LIKELIHOOD.get("stratified")(
      big_fn, prm, t, 32, kk, dataclasses.replace(
          cfg.likelihood, stratified=dataclasses.replace(cfg.likelihood.stratified, num_strata=4), strata_batch=sb),
      mask_id=big.mask_token_id, commit_step=commit_step))
  res["sml_v32k_full_logits_mb"] = 4 * 8 * 64 * 32768 * 4 / 2**20
  res["sml_v32k_vmap_temp_mb"] = bm.compiled_temp_bytes(sml(0), params_big, toks, bench.key) / 2**20
  res["sml_v32k_strata_batch1_temp_mb"] = bm.compiled_temp_bytes(sml(1), params_big, toks, bench.key) / 2**20


def section_scaling(bench: Bench, res: dict[str, Any]) -> None:
  """Rollout tokens/s against L, SML time against K, update time against the group size G. Adds its figures to
  ``res``."""
  rc = bench.cfg.rollout
  r = max(1, bench.r // 2)
  for mult in (1, 2, 4):
    length = rc.gen_length * mult
    vc = dataclasses.replace(rc, gen_length=length, block_length=length, steps=max(1, length // 2))
    t = bm.time_fn(bench.rollout_fn(vc), bench.params, bench.prompts, bench.key, repeats=r)
    res[f"scaling_L{length}_rollout_tokens_per_s"] = bench.b * length / t["best_s"]
    res[f"scaling_L{length}_rollout_s"] = t["best_s"]
  traj = bench.rollout_fn(rc)(bench.params, bench.prompts, bench.key)
  for k in (1, 2, 4, 8):
    if k > rc.gen_length:
      continue
    res[f"scaling_K{k}_sml_logprob_s"] = _logprob_time(bench, _learner(bench, "stratified", k), traj, r)["best_s"]
  prompts_per_step = max(1, bench.b // 16)
  for g in (4, 8, 16):
    b = prompts_per_step * g
    prompts = jnp.repeat(bench.prompts[:prompts_per_step], g, axis=0)
    tr = bench.rollout_fn(rc)(bench.params, prompts, bench.key)
    learner = _learner(bench, bench.cfg.rl.likelihood, bench.cfg.likelihood.stratified.num_strata, g, prompts_per_step)
    res[f"scaling_G{g}_B{b}_update_s"] = _update_time(bench, learner, tr, r)["best_s"]


def section_costs(bench: Bench, res: dict[str, Any]) -> None:
  """Every credit / likelihood method's compiled FLOPs and wall seconds (:mod:`daca_jax.measure.method_costs`),
  printed as a markdown table. Adds its figures to ``res``."""
  from daca_jax.measure import method_costs

  rows = method_costs.measure(bench.cfg, batch_prompts=max(1, bench.b // bench.cfg.rl.group_size),
                              repeats=bench.r)
  print(method_costs.markdown(rows))
  for r in rows:
    for k in ("rollout_flops_ratio", "likelihood_passes", "update_flops_ratio", "update_s"):
      res[f"costs[{r['label']}].{k}"] = r[k]
