"""A plan: compiled per-device memory of one RL iteration, its analytic cross-check, whether it fits
each device kind, and the predicted time per iteration at a stated MFU.

Memory of an iteration. The rollout and the update are separate programs; while the rollout runs,
the optimizer state and the reference copy stay resident beside its arguments, and the update's
arguments hold everything. So the iteration's peak per device is
``max(rollout peak + optimizer + reference, update peak)``, each program's peak being XLA's
``arguments + outputs + temporaries - aliased``. With LoRA the reference *is* the policy's base (the
same buffers passed twice), so the update's argument bytes count the base once less.

Time. FLOPs are the analytic model FLOPs (:mod:`daca_jax.planning.analytic`; XLA's cost analysis
counts a loop body once, and the layers, the sampler's steps and SML's grouped strata are loops), so
the predicted time is ``FLOPs per device / (peak x MFU)`` for each program, and a lower bound of the
FSDP weight all-gathers (every forward pass gathers the other shards once, the backward once more)
over the device's link bandwidth is reported beside it; the larger of the two counts.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from daca_jax.run import benchmarking as bm
from daca_jax.planning import analytic
from daca_jax.planning.compiled import build, compile_rollout, compile_update, per_device_bytes
from daca_jax.planning.devices import DEVICES, DeviceSpec
from daca_jax.planning.spec import PlanSpec, check_spec, model_config, train_config

GB = 1e9


def _passes(spec: PlanSpec) -> tuple[int, int, int]:
  """(policy passes per update, passes kept at once for the backward, positions scored per pass)."""
  if train_config(spec).rl.likelihood == "stratified":
    kept = spec.strata_batch if 0 < spec.strata_batch < spec.num_strata else spec.num_strata
    return spec.num_strata, kept, -(-spec.gen_length // spec.num_strata)
  return 1, 1, spec.gen_length


def run_plan(spec: PlanSpec, available_devices: int | None = None) -> dict[str, Any]:
  """Compiles ``spec``'s rollout and update and returns the plan record (bytes per device, FLOPs).

  Raises:
    ConfigError: from :func:`check_spec`, before any compile.
  """
  check_spec(spec, available_devices)
  built = build(spec)
  rollout, traj = compile_rollout(built)
  update = compile_update(built, traj)
  cfg = model_config(spec)
  rcfg = train_config(spec).rollout
  n = spec.num_devices
  params_b = per_device_bytes(built.params, built, spec)
  opt_b = per_device_bytes(built.opt_state, built, spec)
  shared_b = per_device_bytes(built.shared_base, built, spec) if built.shared_base is not None else 0.0
  ref_b = 0.0 if spec.lora_rank else params_b
  update_peak = update.memory["peak_bytes"] - shared_b
  iteration_peak = max(rollout.memory["peak_bytes"] + opt_b + ref_b, update_peak)
  passes, kept, scored = _passes(spec)
  records = train_config(spec).rl.credit == "dps"
  est = analytic.analytic_memory(cfg, rcfg, batch=spec.batch, prompt_len=spec.prompt_len, devices=n,
                                 fsdp=spec.strategy == "fsdp", lora_rank=spec.lora_rank, passes=kept,
                                 scored_per_pass=scored, remat=spec.remat,
                                 grad_agreement=spec.grad_agreement, records=records)
  seq = spec.prompt_len + spec.gen_length
  rollout_flops = bm.rollout_flops(cfg, rcfg, spec.batch, spec.prompt_len, rcfg.steps, records=records)
  upd_flops = spec.num_iterations * analytic.update_flops(
      cfg, batch=spec.batch, seq=seq, passes=passes, scored=scored, lora=bool(spec.lora_rank),
      remat=spec.remat, reference=spec.beta > 0, old_policy_passes=0) + (spec.num_iterations - 1) * (
      passes * (bm.forward_flops(cfg, spec.batch, seq)))
  base_bytes = analytic.param_count(cfg) * 2.0  # bf16 weights gathered per pass
  gathers = (rcfg.steps, passes * (3 if spec.remat != "none" else 2) + (passes if spec.beta > 0 else 0))
  return {
      "spec": dataclasses.asdict(spec),
      "param_count": analytic.param_count(cfg),
      "trainable_count": analytic.lora_count(cfg, spec.lora_rank) if spec.lora_rank else analytic.param_count(cfg),
      "rollout": dataclasses.asdict(rollout), "update": dataclasses.asdict(update),
      "state_bytes": {"params": params_b, "optimizer": opt_b, "reference": ref_b, "shared_base": shared_b},
      "update_peak_bytes": update_peak, "iteration_peak_bytes": iteration_peak,
      "analytic": dataclasses.asdict(est),
      "flops_per_device": {"rollout": rollout_flops / n, "update": upd_flops / n},
      "fsdp_gather_bytes_per_device": {
          "rollout": gathers[0] * base_bytes * (n - 1) / n if spec.strategy == "fsdp" else 0.0,
          "update": gathers[1] * base_bytes * (n - 1) / n if spec.strategy == "fsdp" else 0.0},
  }


def assess(record: dict[str, Any], device: DeviceSpec, *, mfu: float, usable_fraction: float) -> dict[str, Any]:
  """Fit and predicted seconds of a plan record on ``device`` at ``mfu`` (0 < mfu <= 1)."""
  peak = device.peak_bf16_flops * mfu
  out = {"device": device.name, "mfu": mfu, "usable_fraction": usable_fraction,
         "hbm_gb": device.hbm_bytes / GB, "iteration_peak_gb": record["iteration_peak_bytes"] / GB,
         "fits": record["iteration_peak_bytes"] <= usable_fraction * device.hbm_bytes}
  total = 0.0
  for phase in ("rollout", "update"):
    compute = record["flops_per_device"][phase] / peak
    comm = record["fsdp_gather_bytes_per_device"][phase] / device.link_bytes_per_s
    out[f"{phase}_compute_s"], out[f"{phase}_gather_s"] = compute, comm
    total += max(compute, comm)
  out["iteration_s"] = total
  return out


def compare_rows(record: dict[str, Any]) -> list[list[Any]]:
  """(quantity, compiled GB, analytic GB, note) rows: where the compiled program and the count differ."""
  a, s = record["analytic"], record["state_bytes"]
  upd = record["update"]["memory"]
  rows = [["policy parameters", s["params"] / GB, a["params"] / GB, "exact unless a leaf is replicated"],
          ["optimizer state", s["optimizer"] / GB, a["optimizer"] / GB, "AdamW m, v (+ grad-agreement)"],
          ["reference copy", s["reference"] / GB, a["reference"] / GB, "0 with LoRA (shared base)"],
          ["update arguments", (upd["argument_bytes"] - s["shared_base"]) / GB,
           (a["params"] + a["optimizer"] + a["reference"]) / GB, "+ trajectory, rewards, weights"],
          ["update temporaries", upd["temp_bytes"] / GB, (a["activations"] + a["logits"] + a["grads"]) / GB,
           "activations + logits + one gradient; XLA also holds gathered weights, f32 upcasts"],
          ["rollout temporaries", record["rollout"]["memory"]["temp_bytes"] / GB, a["rollout_records"] / GB,
           "step records only; the rest is logits chunks, noise, gathered weights"]]
  return rows


__all__ = ["DEVICES", "assess", "compare_rows", "run_plan"]
