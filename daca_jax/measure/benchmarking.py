"""Measurement helpers for ``experiments/benchmark.py``: timing, model FLOPs / MFU, memory, and a
PyTorch-eager LLaDA sampler on the same weights for a side-by-side speed figure.

FLOPs follow the usual dense-transformer count (Kaplan et al. 2020; PaLM's MFU, Chowdhery et al.
2022): a forward pass over ``T`` query tokens costs ``2 · N_matmul · T`` for the weight matmuls
(``N_matmul`` = every parameter except the embedding lookup table; the output projection counts) plus
``4 · n_layers · T · S · D`` for attention scores and the weighted sum over ``S`` keys. MFU = achieved
model FLOP/s / the device's peak (dense bf16 by default; a flag overrides it).
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import jax
import numpy as np

from daca_jax.errors import ConfigError
from daca_jax.hardware import device_for_kind, device_peak_bytes  # noqa: F401  (device_peak_bytes: re-exported)
from daca_jax.config.model import ModelConfig
from daca_jax.config.rollout import RolloutConfig

def time_fn(fn: Callable[..., Any], *args: Any, repeats: int = 5, warmup: int = 1) -> dict[str, float]:
  """Compile time and best/median run time (seconds) of ``fn(*args)``, blocking on the result.

  Returns:
    {"compile_s": first call, "best_s": fastest of ``repeats``, "median_s": median of ``repeats``}.
  """
  t0 = time.perf_counter()
  jax.block_until_ready(fn(*args))
  compile_s = time.perf_counter() - t0
  for _ in range(max(warmup - 1, 0)):
    jax.block_until_ready(fn(*args))
  runs = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    runs.append(time.perf_counter() - t0)
  runs.sort()
  return {"compile_s": compile_s, "best_s": runs[0], "median_s": runs[len(runs) // 2]}


def compile_and_time(fn: Callable[..., Any], *args: Any, repeats: int = 5) -> dict[str, Any]:
  """Compiles ``jit(fn)`` for ``args`` once, then times the executable (one warm-up call).

  Returns:
    {"compile_s", "best_s", "median_s", "memory": :func:`compiled_memory` of that executable,
    "compiled": the executable (call it with the same argument shapes)}.
  """
  fn = fn if hasattr(fn, "lower") else jax.jit(fn)
  t0 = time.perf_counter()
  compiled = fn.lower(*args).compile()
  compile_s = time.perf_counter() - t0
  out = time_fn(compiled, *args, repeats=repeats)
  out.update(compile_s=compile_s, memory=memory_stats(compiled), compiled=compiled)
  return out


ROLLOUT_MODE_PARTS = ("prefix", "dual", "threshold")


def rollout_mode_config(rc: RolloutConfig, mode: str, threshold: float) -> RolloutConfig:
  """``rc`` with a training-rollout ``mode``: "plain" (d1's sampler: no cache, no threshold) or
  "+"-joined parts of :data:`ROLLOUT_MODE_PARTS`, e.g. "prefix+threshold" (``rollout.kv_cache`` =
  "prefix", ``rollout.threshold`` = ``threshold``).

  Raises:
    ConfigError: ``mode`` names an unknown part, more than one K/V cache, or nothing.
  """
  parts = [] if mode == "plain" else mode.split("+")
  caches = [x for x in parts if x in ("prefix", "dual")]
  if not parts and mode != "plain" or any(x not in ROLLOUT_MODE_PARTS for x in parts) or len(caches) > 1:
    raise ConfigError("rl_modes", mode, "'plain' or '+'-joined parts of "
                      f"{list(ROLLOUT_MODE_PARTS)} with at most one K/V cache (e.g. 'prefix+threshold')")
  return dataclasses.replace(rc, kv_cache=caches[0] if caches else "none",
                             threshold=threshold if "threshold" in parts else 0.0).validate()


def interleaved_runs(fns: dict[str, Callable[[], Any]], repeats: int = 5) -> dict[str, list[float]]:
  """Wall times (s) of each already-compiled zero-argument callable over ``repeats`` rounds, every
  round running each candidate once (after one warm-up call each).

  On a shared machine the load drifts; alternating the candidates exposes them to the same drift, so
  the ratio of two candidates within a round is fairer than timing one after the other.
  """
  runs: dict[str, list[float]] = {name: [] for name in fns}
  for name, fn in fns.items():  # warm-up
    jax.block_until_ready(fn())
  for _ in range(repeats):
    for name, fn in fns.items():
      t0 = time.perf_counter()
      jax.block_until_ready(fn())
      runs[name].append(time.perf_counter() - t0)
  return runs


def best_of_interleaved(fns: dict[str, Callable[[], Any]], repeats: int = 5) -> dict[str, float]:
  """Best wall time (s) of each callable over :func:`interleaved_runs`."""
  return {name: min(times) for name, times in interleaved_runs(fns, repeats).items()}


def ratio_stats(num: list[float], den: list[float]) -> dict[str, float]:
  """Median, min and max of the per-round ratios ``num[i] / den[i]`` of two interleaved candidates."""
  ratios = sorted(a / b for a, b in zip(num, den))
  return {"median": float(np.median(ratios)), "min": ratios[0], "max": ratios[-1], "rounds": len(ratios)}


def compiled_flops(compiled: Any) -> float:
  """XLA's FLOP count of a compiled executable (``jax.jit(f).lower(...).compile()``); NaN if unknown."""
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):  # older jax returns one dict per computation
    cost = cost[0] if cost else {}
  return float((cost or {}).get("flops", float("nan")))


def compiled_temp_bytes(fn: Callable[..., Any], *args: Any) -> int:
  """XLA's compiled temporary-buffer size (bytes) of ``jax.jit(fn)(*args)``: the peak scratch memory."""
  return compiled_memory(fn, *args)["temp_bytes"]


def compiled_memory(fn: Callable[..., Any], *args: Any) -> dict[str, int]:
  """XLA's compiled buffer sizes (bytes) of ``jax.jit(fn)(*args)``, available on every backend.

  ``peak_bytes`` = arguments + outputs + temporaries (aliased buffers counted once): an upper bound
  of the device memory one call needs, without running it.
  """
  fn = fn if hasattr(fn, "lower") else jax.jit(fn)
  return memory_stats(fn.lower(*args).compile())


def memory_stats(compiled: Any) -> dict[str, int]:
  """Buffer sizes (bytes) of an already compiled executable; keys as :func:`compiled_memory`."""
  s = compiled.memory_analysis()
  out = {"temp_bytes": int(s.temp_size_in_bytes), "argument_bytes": int(s.argument_size_in_bytes),
         "output_bytes": int(s.output_size_in_bytes), "alias_bytes": int(s.alias_size_in_bytes)}
  out["peak_bytes"] = out["temp_bytes"] + out["argument_bytes"] + out["output_bytes"] - out["alias_bytes"]
  return out


def abstract_rollout_memory(model_cfg: ModelConfig, rollout_cfg: RolloutConfig, batch: int, prompt_len: int,
                            mask_id: int, eos_id: int, **record: bool) -> dict[str, int]:
  """Compiled buffer sizes (bytes, keys as :func:`compiled_memory`) of one jitted rollout of a
  ``model_cfg`` model, compiled from shapes alone: no parameter is allocated (``jax.ShapeDtypeStruct``
  parameters, prompts and key), so LLaDA-8B width fits a laptop (fewer layers change only the
  parameter and per-layer K/V terms). ``record`` passes ``record_step_conf`` etc. to the sampler.
  """
  from flax import nnx

  from daca_jax.diffusion.rollout import make_rollout_fn
  from daca_jax.models.llada import Transformer, make_logits_fn

  graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Transformer(model_cfg, nnx.Rngs(0))), nnx.Param)
  logits_fn = make_logits_fn(graphdef, return_hidden=bool(record.get("record_commit_hidden")))
  fn = make_rollout_fn(logits_fn, rollout_cfg, mask_id=mask_id, eos_id=eos_id, **record)
  prompts = jax.ShapeDtypeStruct((batch, prompt_len), np.int32)
  key = jax.eval_shape(lambda: jax.random.PRNGKey(0))
  return memory_stats(fn.lower(abstract, prompts, key).compile())


def peak_flops(override_tflops: float = 0.0, device: jax.Device | None = None) -> float | None:
  """Peak FLOP/s of one chip: ``override_tflops`` (TFLOP/s) when > 0, else the dense bf16 peak of the
  device kind (:func:`daca_jax.hardware.device_for_kind`, the plan's own table); None when
  unknown (CPU, or a kind without an entry), in which case MFU is reported as 'n/a'."""
  if override_tflops > 0:
    return override_tflops * 1e12
  spec = device_for_kind((device or jax.local_devices()[0]).device_kind)
  return None if spec is None else spec.peak_bf16_flops


def matmul_params(cfg: ModelConfig) -> int:
  """Parameters that take part in a matmul per token: all but the embedding table (the tied
  output projection still counts once)."""
  hd, kv = cfg.head_dim, cfg.kv_heads
  per_layer = cfg.d_model * hd * (2 * cfg.n_heads + 2 * kv) + 3 * cfg.d_model * cfg.mlp_dim
  return cfg.n_layers * per_layer + cfg.d_model * cfg.vocab_size


def forward_flops(cfg: ModelConfig, batch: int, q_len: int, kv_len: int | None = None) -> float:
  """Model FLOPs of one forward pass: ``batch`` sequences, ``q_len`` query tokens, ``kv_len`` keys
  (default ``q_len``)."""
  kv_len = q_len if kv_len is None else kv_len
  attn = 4.0 * cfg.n_layers * q_len * kv_len * cfg.n_heads * cfg.head_dim
  return batch * (2.0 * matmul_params(cfg) * q_len + attn)


def rollout_flops(cfg: ModelConfig, rcfg: RolloutConfig, batch: int, prompt_len: int,
                  model_calls: float, *, records: bool = False) -> float:
  """Model FLOPs of one rollout that made ``model_calls`` forward passes.

  Plain / threshold decoding: every call is a full pass over ``P + L`` tokens whose output head
  projects the current block's ``block_length`` positions, or all ``L`` completion positions when the
  rollout keeps step records (``records``: DPS's step confidences, DTCA's entropies); the sampler
  never projects the prompt. With a K/V cache each block's first call is such a full pass and the
  others run the block's query window (the block and everything after it for "prefix", the block for
  "dual") against ``P + L`` keys, the head again over the block or (with records) the window; with a
  threshold the cached calls are spread evenly over the blocks (an estimate: the count per block is
  not kept).
  """
  total = prompt_len + rcfg.gen_length
  nb, bl = rcfg.num_blocks, rcfg.block_length
  head = batch * 2.0 * cfg.d_model * cfg.vocab_size  # one projected position
  projected = rcfg.gen_length if records else bl
  full = forward_flops(cfg, batch, total) - (total - projected) * head
  if rcfg.kv_cache == "none":
    return model_calls * full
  cached_calls = max(model_calls - nb, 0.0)
  windows = [(rcfg.gen_length - b * bl) if rcfg.kv_cache == "prefix" else bl for b in range(nb)]
  mean_window = float(np.mean(windows))
  per_cached = forward_flops(cfg, batch, 1, total) * mean_window  # linear in the query count
  if not records:
    per_cached -= (mean_window - bl) * head
  return nb * full + cached_calls * per_cached


# --- PyTorch-eager reference sampler ----------------------------------------------------------------

def torch_llama_from_params(params: Any, cfg: ModelConfig):
  """transformers' ``LlamaForCausalLM`` with the JAX model's weights, run bidirectionally (eager,
  float32, no causal mask): the architecture LLaDA shares with Llama (Nie et al. 2025, arXiv 2502.09992).

  Raises:
    ImportError: torch or transformers is not installed.
  """
  import torch
  import transformers

  from daca_jax.models.hf_import import NAME_MAPS  # Llama tensor names (Dream uses them), no biases

  hf_cfg = transformers.LlamaConfig(
      hidden_size=cfg.d_model, intermediate_size=cfg.mlp_dim, num_hidden_layers=cfg.n_layers,
      num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.kv_heads, vocab_size=cfg.vocab_size,
      rms_norm_eps=cfg.norm_eps, rope_theta=cfg.rope_theta, tie_word_embeddings=cfg.tie_embeddings,
      hidden_act="silu", attention_bias=False, mlp_bias=False)
  hf_cfg._attn_implementation = "eager"
  hf_cfg.is_causal = False
  model = transformers.LlamaForCausalLM(hf_cfg).eval()
  for m in model.modules():
    if hasattr(m, "is_causal"):
      m.is_causal = False
  from flax import nnx

  pure = nnx.to_pure_dict(params) if isinstance(params, nnx.State) else params
  state = {}
  for path, name, transpose in NAME_MAPS["dream"]:
    if path[-1] == "bias" or (path[0] == "lm_head" and cfg.tie_embeddings):
      continue
    value = pure
    for part in path:
      value = value[part]
    value = np.asarray(value, np.float32)
    layers = range(cfg.n_layers) if path[0] == "layers" else [None]
    for i in layers:
      v = value if i is None else value[i]
      state[name.format(i=i)] = torch.from_numpy(np.array(v.T if transpose else v, order="C"))
  missing, unexpected = model.load_state_dict(state, strict=False)
  if unexpected or any("rotary" not in k for k in missing):
    raise ValueError(f"torch Llama weight copy: missing {missing}, unexpected {unexpected}")
  return model


def torch_llada_generate(model: Any, prompts: np.ndarray, cfg: RolloutConfig, *, mask_id: int,
                         seed: int = 0) -> np.ndarray:
  """LLaDA's ``generate`` loop in eager PyTorch: blocks, LLaDA's tokens-per-step schedule,
  Gumbel-max candidates, low-confidence (or random) remasking. Returns int64 [B, P+L].

  Written for this benchmark from the published algorithm (one full forward pass per step, an
  all-visible 4D attention mask), so that both samplers do the same work; like this library's sampler
  it never proposes ``mask_id`` (:mod:`daca_jax.diffusion.proposals`).
  """
  import torch

  from daca_jax.diffusion.rollout import tokens_per_step

  gen = torch.Generator().manual_seed(seed)
  b, p = prompts.shape
  x = torch.full((b, p + cfg.gen_length), mask_id, dtype=torch.long)
  x[:, :p] = torch.from_numpy(np.asarray(prompts, np.int64))
  attn = torch.zeros((b, 1, x.shape[1], x.shape[1]), dtype=torch.float32)
  k_sched = tokens_per_step(cfg)
  spb = cfg.steps_per_block
  with torch.no_grad():
    for s in range(cfg.steps):
      blk_end = p + (s // spb + 1) * cfg.block_length
      logits = model(input_ids=x, attention_mask=attn).logits.float()
      logits[..., mask_id] = -np.inf
      if cfg.temperature > 0:
        u = torch.rand(logits.shape, generator=gen).clamp_(1e-10, 1.0)
        x0 = torch.argmax(logits - cfg.temperature * torch.log(-torch.log(u)), dim=-1)
      else:
        x0 = torch.argmax(logits, dim=-1)
      probs = torch.softmax(logits, dim=-1)
      if cfg.remasking == "random":
        conf = torch.rand(x0.shape, generator=gen)
      else:
        conf = torch.gather(probs, -1, x0[..., None])[..., 0]
      masked = x == mask_id
      conf[:, blk_end:] = -np.inf
      conf = torch.where(masked, conf, torch.tensor(-np.inf))
      idx = torch.topk(conf, int(k_sched[s]), dim=-1).indices
      commit = torch.zeros_like(masked).scatter_(1, idx, True) & masked
      x = torch.where(commit, x0, x)
  return x.numpy()
