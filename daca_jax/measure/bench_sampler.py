"""Benchmark sections of the sampler: ``rollout`` (tokens/s, compile time, FLOPs and MFU, peak memory, DPS
overhead), ``profile`` (the sampler against bare model passes), ``fast`` (threshold decoding and K/V
caches against plain greedy decoding), ``peak8b`` (compiled peak memory at LLaDA-8B width) and ``torch``
(the same rollout in eager PyTorch)."""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.credit import CREDIT
from daca_jax.measure import benchmarking as bm
from daca_jax.measure.bench import Bench, put_ratio
from daca_jax.models import llada_8b_config
from daca_jax.run.metrics import format_table


def section_rollout(bench: Bench, res: dict[str, Any]) -> None:
  """Rollout tokens/s, compile time, model FLOPs and MFU, peak memory, and DPS's overhead. Adds its figures to
  ``res``."""
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
  put_ratio(res, "rollout_with_dps_vs_plain_ratio", bm.ratio_stats(times["dps"], times["plain"]))
  res["rollout_plain_interleaved_s"] = best["plain"]
  res["rollout_with_dps_s"] = best["dps"]
  res["dps_overhead_pct"] = 100.0 * (best["dps"] / best["plain"] - 1.0)  # runs interleaved


def section_profile(bench: Bench, res: dict[str, Any]) -> None:
  """Where a rollout step's time goes: the sampler (no records, and with DPS's step confidences) against as many
  bare model passes in one compiled scan, interleaved; the non-model share. Adds its figures to ``res``."""
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
    put_ratio(res, f"profile_{name}_vs_model_only_ratio", bm.ratio_stats(times[name], times["model_only"]))
    res[f"profile_{name}_s"] = float(np.median(times[name]))
    res[f"profile_{name}_non_model_pct"] = 100.0 * (1.0 - 1.0 / res[f"profile_{name}_vs_model_only_ratio"])
    rows.append([name, res[f"profile_{name}_s"], res["profile_model_only_s"],
                 res[f"profile_{name}_vs_model_only_ratio"], res[f"profile_{name}_non_model_pct"]])
  print(format_table(rows, ["rollout", "median s", "model-only s", "ratio (median)", "non-model %"]))


def fast_variants(rc, threshold, block_length, variants):
  """(name, config, reference name) of the greedy runs: plain baselines, then the fast options.

  Threshold decoding runs with ``steps = gen_length`` (Fast-dLLM: at least one token per step), so
  its reference is plain decoding of one token per step ("plain_1tok"); the caches are compared with
  plain decoding of the same blocks and steps. ``variants``: ``--fast_variants`` (which to run; the plain
  baselines always run).
  """
  wanted = {v.strip() for v in variants.split(",")}
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


def section_fast(bench: Bench, res: dict[str, Any]) -> None:
  """Threshold decoding and prefix / dual K/V caches: tokens/s, model calls, agreement with plain greedy
  decoding. Adds its figures to ``res``."""
  args = (bench.params, bench.prompts, bench.key)
  variants = fast_variants(bench.cfg.rollout, bench.opts.threshold, bench.opts.fast_block_length,
                             bench.opts.fast_variants)
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


def section_peak8b(bench: Bench, res: dict[str, Any]) -> None:
  """Compiled peak memory of one rollout at LLaDA-8B width (``--peak_layers`` layers), from shapes only: plain,
  recording DPS's step confidences, and with the dual K/V cache. Adds its figures to ``res``."""
  # One rollout at LLaDA-8B width, compiled from shapes only: the sampler's own buffers (logits, Gumbel
  # noise, records) next to the parameters and activations of --peak_layers layers.
  opts = bench.opts
  model = dataclasses.replace(llada_8b_config(param_dtype="bfloat16"), n_layers=opts.peak_layers)
  rc = dataclasses.replace(bench.cfg.rollout, gen_length=opts.gen_length or 256, block_length=opts.block_length or 32,
                           steps=opts.steps or 128, temperature=1.0).validate()
  b, p = bench.b, opts.prompt_len
  res.update(peak8b_layers=model.n_layers, peak8b_batch=b, peak8b_prompt_len=p, peak8b_gen_length=rc.gen_length,
             peak8b_block_length=rc.block_length,
             peak8b_full_canvas_logits_mb=b * (p + rc.gen_length) * model.vocab_size * 4 / 2**20)
  for name, vc, rec in (("plain", rc, {}), ("dps_records", rc, {"record_step_conf": True}),
                        ("dual_cache", dataclasses.replace(rc, kv_cache="dual"), {})):
    mem = bm.abstract_rollout_memory(model, vc, b, p, model.mask_token_id, 126081, **rec)
    res[f"peak8b_{name}_compiled_peak_mb"] = mem["peak_bytes"] / 2**20
    res[f"peak8b_{name}_compiled_temp_mb"] = mem["temp_bytes"] / 2**20


def section_torch(bench: Bench, res: dict[str, Any]) -> None:
  """The same rollout in eager PyTorch (transformers' Llama, the same weights, LLaDA's loop): the JAX / PyTorch
  tokens/s ratio and greedy agreement; skipped without torch. Adds its figures to ``res``."""
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
  put_ratio(res, "jax_vs_torch_eager_tokens_per_s_ratio", bm.ratio_stats(runs["torch"], runs["jax"]))
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
