"""One whole RL iteration on the devices at hand, measured next to its plan (``experiments/iteration_check.py``).

:func:`plan_iteration` plans a flag setting (:func:`daca_jax.planning.spec.plan_flags`) for this
process's devices, switching to LoRA when full fine-tuning does not fit; :func:`measure_iteration` runs
that setting's rollout, likelihood passes and update on random bf16 weights and prompts;
:func:`iteration_report` prints the measured seconds and MFU next to the predicted ones.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.measure import benchmarking as bm
from daca_jax.models import init_model, lora
from daca_jax.planning import plan, spec as plan_spec
from daca_jax.planning.compiled import build
from daca_jax.planning.devices import DeviceSpec
from daca_jax.run.metrics import format_table
from daca_jax.config.train import TrainConfig


def plan_iteration(get_config: Callable[[str], Any], device: DeviceSpec, *, mfu: float, usable: float,
                   fallback_lora_rank: int = 0, prompts_per_device: int = 1, **flags: Any
                   ) -> tuple[TrainConfig, dict[str, Any], dict[str, Any], str]:
  """``(cfg, plan record, prediction on device, note)`` of a flag setting on ``jax.device_count()`` devices
  (``prompts_per_device`` prompts each, FSDP over them, none on one).

  ``flags``: :func:`daca_jax.planning.spec.plan_flags`'s (``lora_rank`` 0: full fine-tuning, replaced
  by ``fallback_lora_rank`` when it does not fit ``usable`` of the device's memory; the note says so).
  """
  n = jax.device_count()
  flags = dict(flags, device=device.name, num_devices=n, strategy="none" if n == 1 else "fsdp",
               prompts_per_step=prompts_per_device * n)
  record = plan_spec.plan_flags(get_config, **flags)
  pred = plan.assess(record, device, mfu=mfu, usable_fraction=usable)
  note = ""
  if not pred["fits"] and not record["spec"]["lora_rank"] and fallback_lora_rank:
    note = (f"full fine-tuning needs {pred['iteration_peak_gb']:.1f} GB per device > {usable:.0%} of "
            f"{device.hbm_bytes / 1e9:.0f} GB: LoRA r {fallback_lora_rank}")
    flags["lora_rank"] = fallback_lora_rank
    record = plan_spec.plan_flags(get_config, **flags)
    pred = plan.assess(record, device, mfu=mfu, usable_fraction=usable)
  cfg = plan_spec.flag_config(get_config, **{k: v for k, v in flags.items() if k not in ("device", "prompt_len")})
  return cfg, record, pred, note


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
  t0 = time.perf_counter()
  out = jax.block_until_ready(fn(*args))
  return out, time.perf_counter() - t0


def measure_iteration(cfg: TrainConfig, prompt_len: int) -> dict[str, float]:
  """Seconds of ``cfg``'s rollout, likelihood passes (one jitted call of the estimator) and update on
  random weights (bf16 where ``model.param_dtype`` is) and random prompts [B, prompt_len] int32: each
  phase's first call (compile and run) and a second one."""
  learner = build(cfg, prompt_len).learner
  _, params = init_model(cfg.model, 0)
  params = jax.tree.map(lambda x: x.astype(jnp.bfloat16) if x.dtype == jnp.float32 and
                        cfg.model.param_dtype == "bfloat16" else x, params)
  ref_params = params
  if cfg.model.lora_rank:
    params = lora.lora_params(params, lora.init_lora(cfg.model, jax.random.PRNGKey(1)))
    ref_params = lora.reference_params(params)
  opt_state = learner.init_opt_state(params)
  rng = np.random.default_rng(0)
  batch = cfg.rl.prompts_per_step * cfg.rl.group_size
  vocab = cfg.model.vocab_limit or cfg.model.vocab_size
  prompts = jnp.asarray(rng.integers(0, min(vocab, cfg.model.mask_token_id), (batch, prompt_len)), jnp.int32)
  key = jax.random.PRNGKey(0)
  measured = {}
  t0 = time.perf_counter()
  traj, _ = _timed(learner.rollout, params, prompts, key)  # compile + run
  measured["rollout_compile_and_run_s"] = time.perf_counter() - t0
  traj, measured["rollout_s"] = _timed(learner.rollout, params, prompts, jax.random.PRNGKey(1))
  rewards = jnp.asarray(rng.integers(0, 2, batch), jnp.float32)
  credit = learner.assign_credit(traj, rewards, learner.init_credit_state())
  weights = credit.weights if credit.token_advantages is None else (credit.weights, credit.token_advantages)
  logp = jax.jit(learner.logprobs)
  _timed(logp, params, traj, key)
  _, measured["likelihood_s"] = _timed(logp, params, traj, jax.random.PRNGKey(2))
  step = lambda p, o: learner.update(p, o, ref_params, traj, rewards, weights, key)
  t0 = time.perf_counter()
  params, opt_state, _ = jax.block_until_ready(step(params, opt_state))
  measured["update_compile_and_run_s"] = time.perf_counter() - t0
  if cfg.model.lora_rank:
    ref_params = lora.reference_params(params)
  (params, opt_state, _), measured["update_s"] = _timed(step, params, opt_state)
  return measured


def iteration_report(record: dict[str, Any], pred: dict[str, Any], measured: dict[str, float], *,
                     device: DeviceSpec, mfu: float, peak_bytes: int | None) -> str:
  """The measured seconds and MFU of each phase next to the predicted ones, and the allocator's peak
  (None: 'n/a') next to the compiled iteration peak."""
  flops = bm.peak_flops()
  rows = []
  for phase in ("rollout", "update"):
    f = record["flops_per_device"][phase]
    got = f / measured[f"{phase}_s"] / flops if flops else None
    rows.append([phase, pred[f"{phase}_s"], measured[f"{phase}_s"], mfu, "n/a" if got is None else got,
                 record[phase]["memory"]["peak_bytes"] / 1e9])
  s = record["spec"]
  return "\n".join([
      f"\n{s['model']} x{s['num_devices']} {jax.devices()[0].device_kind}: {s['method']}, LoRA r {s['lora_rank']}, "
      f"B {s['prompts_per_step'] * s['group_size']}, L {s['gen_length']}, remat {s['remat']}",
      format_table(rows, ["phase", f"predicted s ({device.name})", "measured s", "predicted MFU",
                          "measured MFU", "compiled peak GB"]),
      f"likelihood passes (forward only): {measured['likelihood_s']:.3f} s",
      f"iteration peak per device: predicted {record['iteration_peak_bytes'] / 1e9:.2f} GB, allocator peak "
      f"{'n/a (no allocator stats on this backend)' if peak_bytes is None else f'{peak_bytes / 1e9:.2f} GB'}"])


__all__ = ["iteration_report", "measure_iteration", "plan_iteration"]
