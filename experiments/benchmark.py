"""Speed, FLOP utilisation and memory figures, measured in one run and printed side by side.

  python experiments/benchmark.py [--config=configs/sudoku_tiny.py] [--sections=rollout,fast,torch]
      [--batch=64] [--json=bench.json]
  # LLaDA-8B size, random bf16 weights (an accelerator; see experiments/scripts/gpu_check.sh):
  python experiments/benchmark.py --model=llada_8b --sections=rollout,fast --batch=8

Sections (``--sections``, comma separated; ``all`` adds the slow ``accuracy`` and ``rl_iteration``):
  rollout    rollout tokens/s, compile time, model FLOPs and MFU, peak memory, DPS overhead.
  profile    where a rollout step's time goes: the sampler (no records, and with DPS's step
             confidences) against the same number of bare model passes (transformer + output head
             over the completion) in one compiled scan, interleaved; the non-model share.
  fast       threshold decoding and prefix / dual K/V cache: tokens/s, model calls, agreement with
             plain greedy decoding.
  likelihood SML (K=4) vs mean-field per-token likelihood time; update step time, compiled peak
             memory and compile time; SML with strata_batch=1; mean-field on a 4x batch (the same
             model work as SML's four passes).
  memory     compiled scratch memory of SML at V=32k, all strata at once vs one at a time.
  peak8b     compiled peak memory of one rollout at LLaDA-8B width (D 4096, V 126464, bf16,
             ``--peak_layers`` layers), compiled from shapes only (no parameter is allocated):
             plain, recording DPS's step confidences, and with the dual K/V cache; d1's geometry
             (L 256, block 32, 128 steps) unless --gen_length/--block_length/--steps are given.
  scaling    rollout tokens/s vs L, SML time vs K, update time vs group size G.
  torch      the same rollout in eager PyTorch (transformers' Llama, bidirectional, same weights,
             LLaDA's loop); prints the JAX / PyTorch tokens/s ratio. Skipped if torch is missing.
  costs      every credit / likelihood method's cost from XLA's compiled FLOPs (rollout with its
             records, likelihood passes, update vs d1) and wall seconds: daca_jax.run.method_costs.
  accuracy   Sudoku strict_solved of plain vs threshold vs cached decoding with an SFT'd tiny model
             (``--sft_dir`` to reuse a checkpoint folder, else a short SFT of ``--sft_steps``).
  rl_iteration  one RL iteration of the config's recipe (the training rollout of prompts_per_step x
             sample_group_size sequences at the rollout temperature, then credit and one update of the
             kept rows) with each training-rollout mode of ``--rl_modes``, from the SFT'd model (as
             ``accuracy``), interleaved: rollout, update and iteration seconds, model calls, and each
             mode's speed-up over d1's sampler (median of the per-round ratios, with their range).

Absolute times are only meaningful on an accelerator; ratios measured in the same run are what to
compare. MFU uses the device's dense bf16 peak (``--peak_tflops`` overrides; 'n/a' on CPU unless given).
"""

import dataclasses
import functools
import pathlib
import shutil
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging
from ml_collections import config_flags

from daca_jax.run import benchmarking as bm
from daca_jax.credit import CREDIT
from daca_jax.diffusion import make_rollout_fn
from daca_jax.io_utils import atomic_write_json
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.run.metrics import format_table
from daca_jax.models import count_params, init_model, llada_8b_config, make_logits_fn
from daca_jax.configure import train_config_from_dict

SECTIONS = ("rollout", "profile", "fast", "likelihood", "memory", "peak8b", "scaling", "torch", "costs", "accuracy",
            "rl_iteration")
_CONFIG = config_flags.DEFINE_config_file("config", "configs/sudoku_tiny.py", "Config file.")
_SECTIONS = flags.DEFINE_string("sections", "rollout,profile,fast,likelihood,memory,scaling,torch,costs",
                                f"Comma-separated sections of {list(SECTIONS)}, or 'all'.")
_MODEL = flags.DEFINE_enum("model", "config", ["config", "llada_8b"],
                           "'config': the config's model and task prompts; 'llada_8b': LLaDA-8B "
                           "geometry, random bf16 weights, random prompts (rollout/fast only).")
_SHRINK = flags.DEFINE_bool("shrink", False, "--model=llada_8b with d_model 64, 2 layers (the same code "
                            "path, CPU-sized: how tests check gpu_check.sh).")
_BATCH = flags.DEFINE_integer("batch", 64, "Sequences per rollout / likelihood call.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed repetitions (best is reported).")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 64, "Prompt tokens for --model=llada_8b.")
_GEN = flags.DEFINE_integer("gen_length", 0, "Override rollout.gen_length (0: config).")
_BLOCK = flags.DEFINE_integer("block_length", 0, "Override rollout.block_length (0: config).")
_STEPS = flags.DEFINE_integer("steps", 0, "Override rollout.steps (0: config).")
_THRESHOLD = flags.DEFINE_float("threshold", 0.9, "Confidence threshold of the 'fast' section (Fast-dLLM).")
_FAST_BLOCK = flags.DEFINE_integer("fast_block_length", 0,
                                   "Block length of the fast/accuracy cache runs (0: the rollout's; "
                                   "a cache needs more than one block to matter).")
_FAST_VARIANTS = flags.DEFINE_string("fast_variants", "plain,threshold,prefix,dual,threshold+dual",
                                     "fast/accuracy: which variants to run (the plain baselines "
                                     "always run).")
_PEAK = flags.DEFINE_float("peak_tflops", 0.0, "Peak TFLOP/s per chip for MFU (0: device table).")
_SFT_DIR = flags.DEFINE_string("sft_dir", "", "accuracy: an SFT checkpoint folder to reuse (copied).")
_SFT_STEPS = flags.DEFINE_integer("sft_steps", 300, "accuracy: SFT steps when --sft_dir is not given.")
_EVAL_N = flags.DEFINE_integer("eval_examples", 500, "accuracy: evaluation puzzles.")
_RL_MODES = flags.DEFINE_string("rl_modes", "plain,prefix,threshold,prefix+threshold",
                                "rl_iteration: training-rollout modes, each 'plain' or '+'-joined parts of "
                                "prefix / dual (rollout.kv_cache) and threshold (rollout.threshold=--threshold).")
_JSON = flags.DEFINE_string("json", "", "Also write every figure to this JSON file.")
_PEAK_LAYERS = flags.DEFINE_integer("peak_layers", 2, "peak8b: transformer layers of the LLaDA-8B-width "
                                    "model (the sampler's buffers do not depend on depth).")
_REMAT = flags.DEFINE_enum("remat", "", ["", "none", "full", "dots", "dots_saveable"],
                           "Override model.remat (per-layer rematerialisation) for every section.")


class Bench:
  """The model, prompts and sampler config every section measures."""

  def __init__(self):
    cfg = train_config_from_dict(_CONFIG.value)
    rollout = dataclasses.replace(cfg.rollout, **{k: v for k, v in (
        ("gen_length", _GEN.value), ("block_length", _BLOCK.value), ("steps", _STEPS.value)) if v})
    if rollout.block_length > rollout.gen_length:
      rollout = dataclasses.replace(rollout, block_length=rollout.gen_length)
    self.b, self.r = _BATCH.value, _REPEATS.value
    self.key = jax.random.PRNGKey(0)
    if _MODEL.value == "llada_8b":
      model = llada_8b_config(param_dtype="bfloat16")
      if _SHRINK.value:
        model = dataclasses.replace(model, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, mlp_dim=128)
      self.task = None
      self.mask_id, self.eos_id = model.mask_token_id, 126081
      rng = np.random.default_rng(0)
      self.prompts = jnp.asarray(rng.integers(0, 126000, (self.b, _PROMPT_LEN.value)), jnp.int32)
    else:
      model = cfg.model
      from daca_jax.run.pipeline import build_task

      self.task = build_task(dataclasses.replace(cfg, rollout=rollout))
      self.mask_id, self.eos_id = self.task.tokenizer.mask_id, self.task.tokenizer.eos_id
      self.prompts = jnp.asarray(self.task.encode_prompts(self.task.train_examples(self.b, cfg.seed)))
    if _REMAT.value:
      model = dataclasses.replace(model, remat=_REMAT.value)
    self.cfg = dataclasses.replace(cfg, model=model, rollout=rollout.validate())
    t0 = time.perf_counter()
    self.graphdef, self.params = init_model(model, cfg.seed)
    self.init_s = time.perf_counter() - t0
    self.logits_fn = make_logits_fn(self.graphdef)
    self.p = int(self.prompts.shape[1])
    self.peak = bm.peak_flops(_PEAK.value)

  def rollout_fn(self, rcfg, **kw):
    return make_rollout_fn(self.logits_fn, rcfg, mask_id=self.mask_id, eos_id=self.eos_id, **kw)

  def mfu(self, flops_per_s):
    return flops_per_s / self.peak if self.peak else "n/a"


def _put_ratio(res, name, stats):
  """A ratio of interleaved runs: the median of the per-round ratios under ``name``, with its range
  and round count beside it (one run on a loaded machine says little; the spread shows how little)."""
  res[name] = stats["median"]
  res[f"{name}_min"], res[f"{name}_max"], res[f"{name}_rounds"] = stats["min"], stats["max"], stats["rounds"]


def section_rollout(bench, res):
  rc = bench.cfg.rollout
  t = bm.compile_and_time(bench.rollout_fn(rc), bench.params, bench.prompts, bench.key, repeats=bench.r)
  flops = bm.rollout_flops(bench.cfg.model, rc, bench.b, bench.p, rc.steps)
  res.update(rollout_s=t["best_s"], rollout_compile_s=t["compile_s"],
             rollout_tokens_per_s=bench.b * rc.gen_length / t["best_s"],
             rollout_model_tflop=flops / 1e12, rollout_model_tflops_per_s=flops / t["best_s"] / 1e12,
             rollout_mfu=bench.mfu(flops / t["best_s"]))
  mem = t["memory"]
  res["rollout_compiled_peak_mb"] = mem["peak_bytes"] / 2**20
  res["rollout_compiled_temp_mb"] = mem["temp_bytes"] / 2**20
  dev = bm.device_peak_bytes()
  res["device_peak_mb"] = dev / 2**20 if dev is not None else "n/a (no allocator stats on this backend)"
  # DPS: the same rollout recording step confidences, then the DPS weights: no extra model call.
  recorded = bench.rollout_fn(rc, record_step_conf=True)
  dps = CREDIT.get("dps")
  with_dps = jax.jit(lambda prm, x, k: dps(recorded(prm, x, k), bench.cfg.credit, rc))
  args = (bench.params, bench.prompts, bench.key)
  t_dps = bm.compile_and_time(with_dps, *args, repeats=1)
  times = bm.interleaved_runs({"plain": lambda: t["compiled"](*args),
                              "dps": lambda: t_dps["compiled"](*args)}, bench.r)
  best = {name: min(v) for name, v in times.items()}
  _put_ratio(res, "rollout_with_dps_vs_plain_ratio", bm.ratio_stats(times["dps"], times["plain"]))
  res["rollout_plain_interleaved_s"] = best["plain"]
  res["rollout_with_dps_s"] = best["dps"]
  res["dps_overhead_pct"] = 100.0 * (best["dps"] / best["plain"] - 1.0)  # runs interleaved


def section_profile(bench, res):
  # The bare model work of a rollout: S full passes over [B, P+L] with the output head over the
  # completion, in one compiled scan (the canvas changes every step so nothing is hoisted out of the
  # loop; the logits' sum keeps the head from being simplified away). What the sampler spends beyond
  # it (restricting and normalising the logits, the Gumbel noise, the top-k commit, the records) is
  # not model work.
  rc = bench.cfg.rollout
  p, length, steps = bench.p, rc.gen_length, rc.steps
  canvas = jnp.concatenate([bench.prompts, jnp.full((bench.b, length), bench.mask_id, jnp.int32)], axis=1)

  def model_only(prm, x):
    def step(carry, s):
      x, acc = carry
      x = x.at[:, p + s % length].set(s % 7)
      logits = bench.logits_fn(prm, x)[:, p:]
      return (x, acc + jnp.sum(logits.astype(jnp.float32))), None
    (_, acc), _ = jax.lax.scan(step, (x, jnp.zeros((), jnp.float32)), jnp.arange(steps, dtype=jnp.int32))
    return acc

  fns = {"model_only": (jax.jit(model_only), (bench.params, canvas)),
         "sampler": (bench.rollout_fn(rc), (bench.params, bench.prompts, bench.key)),
         "sampler_dps_records": (bench.rollout_fn(rc, record_step_conf=True),
                                 (bench.params, bench.prompts, bench.key))}
  compiled, rows = {}, []
  for name, (fn, args) in fns.items():
    compiled[name] = functools.partial(jax.jit(fn).lower(*args).compile(), *args)
  times = bm.interleaved_runs(compiled, max(3, bench.r))
  res["profile_model_only_s"] = float(np.median(times["model_only"]))
  for name in ("sampler", "sampler_dps_records"):
    _put_ratio(res, f"profile_{name}_vs_model_only_ratio", bm.ratio_stats(times[name], times["model_only"]))
    res[f"profile_{name}_s"] = float(np.median(times[name]))
    res[f"profile_{name}_non_model_pct"] = 100.0 * (1.0 - 1.0 / res[f"profile_{name}_vs_model_only_ratio"])
    rows.append([name, res[f"profile_{name}_s"], res["profile_model_only_s"],
                 res[f"profile_{name}_vs_model_only_ratio"], res[f"profile_{name}_non_model_pct"]])
  print(format_table(rows, ["rollout", "median s", "model-only s", "ratio (median)", "non-model %"]))


def _fast_variants(rc, threshold, block_length):
  """(name, config, reference name) of the greedy runs: plain baselines, then the fast options.

  Threshold decoding runs with ``steps = gen_length`` (Fast-dLLM: at least one token per step), so
  its reference is plain decoding of one token per step ("plain_1tok"); the caches are compared with
  plain decoding of the same blocks and steps.
  """
  wanted = {v.strip() for v in _FAST_VARIANTS.value.split(",")}
  greedy = dataclasses.replace(rc, temperature=0.0)
  blocked = greedy
  if block_length and block_length != rc.block_length:
    nb = rc.gen_length // block_length
    blocked = dataclasses.replace(greedy, block_length=block_length,
                                  steps=max(nb, (rc.steps // nb) * nb)).validate()
  tag = "" if blocked is greedy else f"_b{blocked.block_length}"
  one_tok = dataclasses.replace(greedy, steps=rc.gen_length)
  out = [("plain", greedy, "plain")]
  if "threshold" in wanted:
    out += [("plain_1tok", one_tok, "plain_1tok"),
            (f"threshold{threshold}", dataclasses.replace(one_tok, threshold=threshold), "plain_1tok")]
  if tag:
    out.append(("plain" + tag, blocked, "plain" + tag))
  ref = "plain" + tag
  for mode in ("prefix", "dual"):
    if mode in wanted:
      out.append((mode + tag, dataclasses.replace(blocked, kv_cache=mode), ref))
  if "threshold+dual" in wanted:
    out.append((f"threshold{threshold}+dual" + tag, dataclasses.replace(
        blocked, steps=rc.gen_length, threshold=threshold, kv_cache="dual"), ref))
  return out


def section_fast(bench, res):
  args = (bench.params, bench.prompts, bench.key)
  variants = _fast_variants(bench.cfg.rollout, _THRESHOLD.value, _FAST_BLOCK.value)
  compiled = {name: bm.compile_and_time(bench.rollout_fn(vc), *args, repeats=1) for name, vc, _ in variants}
  best = bm.best_of_interleaved({name: functools.partial(c["compiled"], *args)
                                 for name, c in compiled.items()}, bench.r)
  rows, base = [], {}
  for name, vc, ref in variants:
    traj = compiled[name]["compiled"](*args)
    calls = int(traj.model_calls)
    comp = np.asarray(traj.completion)
    if name == ref:
      base[name] = comp
    flops = bm.rollout_flops(bench.cfg.model, vc, bench.b, bench.p, calls)
    row = {"tokens_per_s": bench.b * vc.gen_length / best[name], "model_calls": calls,
           "max_calls": vc.steps, "reference": ref, "speedup_vs_reference": best[ref] / best[name],
           "token_agreement_vs_reference": float(np.mean(comp == base[ref])),
           "compile_s": compiled[name]["compile_s"], "mfu": bench.mfu(flops / best[name])}
    for k, v in row.items():
      res[f"fast_{name}_{k}"] = v
    rows.append([name, row["tokens_per_s"], calls, vc.steps, ref, row["speedup_vs_reference"],
                 row["token_agreement_vs_reference"]])
  print(format_table(rows, ["greedy variant", "tokens/s", "calls", "max calls", "reference", "speedup",
                            "agree"]))


def _learner(bench, likelihood, k, group_size=None, prompts_per_step=None, strata_batch=None):
  from daca_jax.rl import GRPOLearner

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


def section_likelihood(bench, res):
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
  _put_ratio(res, "sml_k4_vs_mean_field_update_ratio", bm.ratio_stats(times["stratified_update"],
                                                                      times["mean_field_update"]))
  mf = res["mean_field_update_s"]
  res["sml_k4_vs_mean_field_logprob_ratio"] = res["stratified_logprob_s"] / res["mean_field_logprob_s"]
  res["sml_k4_strata_batch1_vs_mean_field_update_ratio"] = res["stratified_strata_batch1_update_s"] / mf
  res[f"mean_field_{k}x_batch_vs_mean_field_update_ratio"] = res[f"mean_field_{k}x_batch_update_s"] / mf
  res[f"sml_k4_vs_mean_field_{k}x_batch_update_ratio"] = (res["stratified_update_s"]
                                                         / res[f"mean_field_{k}x_batch_update_s"])


def section_memory(bench, res):
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


def section_peak8b(bench, res):
  # One rollout at LLaDA-8B width, compiled from shapes only: the sampler's own buffers (logits, Gumbel
  # noise, records) next to the parameters and activations of --peak_layers layers.
  model = dataclasses.replace(llada_8b_config(param_dtype="bfloat16"), n_layers=_PEAK_LAYERS.value)
  rc = dataclasses.replace(bench.cfg.rollout, gen_length=_GEN.value or 256, block_length=_BLOCK.value or 32,
                           steps=_STEPS.value or 128, temperature=1.0).validate()
  b, p = bench.b, _PROMPT_LEN.value
  res.update(peak8b_layers=model.n_layers, peak8b_batch=b, peak8b_prompt_len=p, peak8b_gen_length=rc.gen_length,
             peak8b_block_length=rc.block_length,
             peak8b_full_canvas_logits_mb=b * (p + rc.gen_length) * model.vocab_size * 4 / 2**20)
  for name, vc, rec in (("plain", rc, {}), ("dps_records", rc, {"record_step_conf": True}),
                        ("dual_cache", dataclasses.replace(rc, kv_cache="dual"), {})):
    mem = bm.abstract_rollout_memory(model, vc, b, p, model.mask_token_id, 126081, **rec)
    res[f"peak8b_{name}_compiled_peak_mb"] = mem["peak_bytes"] / 2**20
    res[f"peak8b_{name}_compiled_temp_mb"] = mem["temp_bytes"] / 2**20


def section_scaling(bench, res):
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


def section_torch(bench, res):
  try:
    import torch
    import transformers  # noqa: F401
  except ImportError as e:
    print(f"torch section skipped: {e} (pip install torch transformers)")
    res["torch_skipped"] = str(e)
    return
  rc = bench.cfg.rollout
  model = bm.torch_llama_from_params(bench.params, bench.cfg.model)
  prompts = np.asarray(bench.prompts)
  jax_fn = bench.rollout_fn(rc)
  runs = bm.interleaved_runs(  # interleaved: both see the same machine load
      {"jax": lambda: jax_fn(bench.params, bench.prompts, bench.key),
       "torch": lambda: bm.torch_llada_generate(model, prompts, rc, mask_id=bench.mask_id)},
      max(3, bench.r))
  best = {name: min(t) for name, t in runs.items()}
  _put_ratio(res, "jax_vs_torch_eager_tokens_per_s_ratio", bm.ratio_stats(runs["torch"], runs["jax"]))
  tokens = bench.b * rc.gen_length
  res["torch_section_jax_rollout_s"] = best["jax"]
  res["torch_eager_rollout_s"] = best["torch"]
  res["torch_eager_tokens_per_s"] = tokens / best["torch"]
  res["torch_threads"] = torch.get_num_threads()
  # Same weights, same loop: greedy decoding must agree token for token (a sanity check of the port).
  greedy = dataclasses.replace(rc, temperature=0.0)
  jax_tokens = np.asarray(bench.rollout_fn(greedy)(bench.params, bench.prompts, bench.key).tokens)
  torch_tokens = bm.torch_llada_generate(model, prompts, greedy, mask_id=bench.mask_id)
  res["torch_greedy_token_agreement"] = float(np.mean(jax_tokens == torch_tokens))


def section_costs(bench, res):
  from daca_jax.run import method_costs

  rows = method_costs.measure(bench.cfg, batch_prompts=max(1, bench.b // bench.cfg.rl.group_size),
                              repeats=bench.r)
  print(method_costs.markdown(rows))
  for r in rows:
    for k in ("rollout_flops_ratio", "likelihood_passes", "update_flops_ratio", "update_s"):
      res[f"costs[{r['label']}].{k}"] = r[k]


def _sft_params(bench, res):
  """The SFT'd model's parameters: ``--sft_dir``'s checkpoint (copied), else a short SFT."""
  from daca_jax.run.pipeline import run_sft

  cfg, task = bench.cfg, bench.task
  with tempfile.TemporaryDirectory() as tmp:
    sft_dir = pathlib.Path(tmp) / "sft"
    steps = cfg.sft.steps
    if _SFT_DIR.value:
      shutil.copytree(_SFT_DIR.value, sft_dir)  # never write into someone else's folder
      steps = max(int(s.name) for s in sft_dir.iterdir() if s.name.isdigit())
    else:
      steps = _SFT_STEPS.value
    sft_cfg = dataclasses.replace(cfg, sft=dataclasses.replace(cfg.sft, steps=steps))
    t0 = time.perf_counter()
    params, trained = run_sft(sft_cfg, task, task.train_examples(cfg.sft.num_train_examples, cfg.seed),
                              bench.logits_fn, bench.params, sft_dir, show_progress=False)
    res["sft_steps"] = steps
    res["sft_s"] = time.perf_counter() - t0 if trained else 0.0
  return params


def section_accuracy(bench, res):
  cfg, task = bench.cfg, bench.task
  params = _sft_params(bench, res)
  examples, source = task.eval_examples()
  examples = examples[:_EVAL_N.value]
  res["accuracy_eval_source"] = source
  prompts = task.encode_prompts(examples)
  bs = min(cfg.eval.batch_size, len(examples))
  nb = -(-len(examples) // bs)
  padded = jnp.asarray(np.concatenate([prompts, np.repeat(prompts[-1:], nb * bs - len(examples), 0)]))
  rows = []
  for name, vc, _ in _fast_variants(cfg.rollout, _THRESHOLD.value, _FAST_BLOCK.value):
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


def _rl_modes():
  """--rl_modes as a list, d1's sampler ("plain", every ratio's reference) first."""
  modes = [m.strip() for m in _RL_MODES.value.split(",") if m.strip()]
  return modes if "plain" in modes else ["plain"] + modes


def section_rl_iteration(bench, res):
  from daca_jax.rl import GRPOLearner
  from daca_jax.rl.downsample import take_rows

  if bench.task is None:
    raise app.UsageError("--sections=rl_iteration needs the config's task (not --model=llada_8b)")
  cfg = bench.cfg
  modes = _rl_modes()
  params = _sft_params(bench, res)
  n, g, p = cfg.rl.sample_group_size or cfg.rl.group_size, cfg.rl.group_size, cfg.rl.prompts_per_step
  prompts = jnp.asarray(np.repeat(bench.task.encode_prompts(bench.task.train_examples(p, cfg.seed + 1)), n, 0))
  kept = jnp.asarray((np.arange(p)[:, None] * n + np.arange(g)[None, :]).reshape(-1))  # g of each group
  rewards = jnp.asarray(np.random.default_rng(1).uniform(size=p * g), jnp.float32)
  runners, calls = {}, {}
  for mode in modes:
    c = dataclasses.replace(cfg, rollout=bm.rollout_mode_config(cfg.rollout, mode, _THRESHOLD.value))
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
    _put_ratio(res, f"{tag}_rollout_speedup", rspeed)
    _put_ratio(res, f"{tag}_iteration_speedup", speed)
    rows.append([m, roll, upd, roll + upd, f"{calls[m]}/{cfg.rollout.steps}", rspeed["median"],
                 f"{speed['median']:.2f} [{speed['min']:.2f}, {speed['max']:.2f}]"])
  res["rl_rollout_rows"], res["rl_update_rows"] = int(prompts.shape[0]), int(kept.shape[0])
  print(format_table(rows, ["training rollout", "rollout s", "update s", "iteration s", "model calls",
                            "rollout speed-up", "iteration speed-up [range]"]))


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  chosen = SECTIONS if _SECTIONS.value == "all" else tuple(s.strip() for s in _SECTIONS.value.split(",") if s.strip())
  unknown = [s for s in chosen if s not in SECTIONS]
  if unknown:
    print(f"error: --sections: unknown {unknown}; choose from {list(SECTIONS)} or 'all'", file=sys.stderr)
    sys.exit(2)
  if "rl_iteration" in chosen:  # a bad mode is refused before the model is built
    from daca_jax.errors import ConfigError
    from daca_jax.types import RolloutConfig

    for mode in _rl_modes():
      try:
        bm.rollout_mode_config(RolloutConfig(), mode, _THRESHOLD.value)
      except ConfigError as e:
        print(f"error: --{e}", file=sys.stderr)
        sys.exit(2)
  bench = Bench()
  if _MODEL.value == "llada_8b":
    dropped = [s for s in chosen if s not in ("rollout", "fast")]
    if dropped:
      print(f"--model=llada_8b runs only the rollout and fast sections; skipping {dropped}")
    chosen = tuple(s for s in chosen if s in ("rollout", "fast"))
  rc = bench.cfg.rollout
  res = {"backend": jax.default_backend(), "device": jax.devices()[0].device_kind,
         "model": _MODEL.value, "params": count_params(bench.params),
         "matmul_params": bm.matmul_params(bench.cfg.model), "init_s": bench.init_s, "batch": bench.b,
         "prompt_len": bench.p, "gen_length": rc.gen_length, "block_length": rc.block_length,
         "steps": rc.steps, "temperature": rc.temperature,
         "peak_tflops": bench.peak / 1e12 if bench.peak else "n/a"}
  for name in SECTIONS:
    if name in chosen:
      t0 = time.perf_counter()
      globals()[f"section_{name}"](bench, res)
      res[f"section_{name}_s"] = time.perf_counter() - t0
      if _JSON.value:  # after every section, so that a run cut short keeps what it measured
        atomic_write_json(_JSON.value, res)
  print(format_table([[k, v] for k, v in res.items()], ["figure", "value"]))
  if "rollout_mfu" in res:
    mfu = res["rollout_mfu"]
    print(f"rollout MFU: {mfu if isinstance(mfu, str) else f'{100 * mfu:.1f}%'} "
          f"({res['rollout_model_tflops_per_s']:.2f} model TFLOP/s)")


if __name__ == "__main__":
  app.run(main)
