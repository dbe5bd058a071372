"""What every benchmark section measures (:class:`Bench`: the model, prompts and sampler config of one
run) and the options that shape it (:class:`BenchOptions`, the flags of ``experiments/benchmark.py``).

The sections themselves: :mod:`~daca_jax.measure.bench_sampler` (rollout, profile, fast, peak8b, torch),
:mod:`~daca_jax.measure.bench_update` (likelihood, memory, scaling, costs),
:mod:`~daca_jax.measure.bench_sft` (accuracy, rl_iteration, from an SFT'd model);
:mod:`~daca_jax.measure.bench_sections` runs the chosen ones in order.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.config.configure import train_config_from_dict
from daca_jax.diffusion import make_rollout_fn
from daca_jax.measure import benchmarking as bm
from daca_jax.models import init_model, llada_8b_config, make_logits_fn


@dataclasses.dataclass(frozen=True)
class BenchOptions:
  """The benchmark's options; each field is the ``experiments/benchmark.py`` flag of the same name, whose
  help says what it does (the defaults are the flags' defaults)."""

  model: str = "config"
  shrink: bool = False
  batch: int = 64
  repeats: int = 5
  prompt_len: int = 64
  gen_length: int = 0
  block_length: int = 0
  steps: int = 0
  threshold: float = 0.9
  fast_block_length: int = 0
  fast_variants: str = "plain,threshold,prefix,dual,threshold+dual"
  peak_tflops: float = 0.0
  sft_dir: str = ""
  sft_steps: int = 300
  eval_examples: int = 500
  rl_modes: str = "plain,prefix,threshold,prefix+threshold"
  peak_layers: int = 2
  remat: str = ""


class Bench:
  """The model, prompts and sampler config every section measures.

  Args:
    config: the training config (a ``ConfigDict``, ``--config``).
    opts: the benchmark's options (``experiments/benchmark.py``'s flags).
  """

  def __init__(self, config: Any, opts: BenchOptions):
    self.opts = opts
    cfg = train_config_from_dict(config)
    rollout = dataclasses.replace(cfg.rollout, **{k: v for k, v in (
        ("gen_length", opts.gen_length), ("block_length", opts.block_length), ("steps", opts.steps)) if v})
    if rollout.block_length > rollout.gen_length:
      rollout = dataclasses.replace(rollout, block_length=rollout.gen_length)
    self.b, self.r = opts.batch, opts.repeats
    self.key = jax.random.PRNGKey(0)
    if opts.model == "llada_8b":
      model = llada_8b_config(param_dtype="bfloat16")
      if opts.shrink:
        model = dataclasses.replace(model, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, mlp_dim=128)
      self.task = None
      self.mask_id, self.eos_id = model.mask_token_id, 126081
      rng = np.random.default_rng(0)
      self.prompts = jnp.asarray(rng.integers(0, 126000, (self.b, opts.prompt_len)), jnp.int32)
    else:
      model = cfg.model
      from daca_jax.run.task_views import build_task

      self.task = build_task(dataclasses.replace(cfg, rollout=rollout))
      self.mask_id, self.eos_id = self.task.tokenizer.mask_id, self.task.tokenizer.eos_id
      self.prompts = jnp.asarray(self.task.encode_prompts(self.task.train_examples(self.b, cfg.seed)))
    if opts.remat:
      model = dataclasses.replace(model, remat=opts.remat)
    self.cfg = dataclasses.replace(cfg, model=model, rollout=rollout.validate())
    t0 = time.perf_counter()
    self.graphdef, self.params = init_model(model, cfg.seed)
    self.init_s = time.perf_counter() - t0
    self.logits_fn = make_logits_fn(self.graphdef)
    self.p = int(self.prompts.shape[1])
    self.peak = bm.peak_flops(opts.peak_tflops)

  def rollout_fn(self, rcfg, **kw):
    return make_rollout_fn(self.logits_fn, rcfg, mask_id=self.mask_id, eos_id=self.eos_id, **kw)

  def mfu(self, flops_per_s):
    return flops_per_s / self.peak if self.peak else "n/a"


def put_ratio(res, name, stats):
  """A ratio of interleaved runs: the median of the per-round ratios under ``name``, with its range
  and round count beside it (one run on a loaded machine says little; the spread shows how little)."""
  res[name] = stats["median"]
  res[f"{name}_min"], res[f"{name}_max"], res[f"{name}_rounds"] = stats["min"], stats["max"], stats["rounds"]
