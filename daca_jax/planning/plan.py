"""A plan: compiled per-device memory of one RL iteration, whether it fits each device kind, and the
predicted time per iteration, all from the programs the run would compile.

Memory of an iteration. The rollout and the update are separate programs; while the rollout runs,
the optimizer state and the reference copy stay resident beside its arguments, and the update's
arguments hold everything. So the iteration's peak per device is
``max(rollout peak + optimizer + reference, update peak)``, each program's peak being XLA's
``arguments + outputs + temporaries - aliased``. With LoRA the reference *is* the policy's base (the
same buffers passed twice), so the update's argument bytes count the base once less. With
``rl.rollout_batch`` the rollout's peak is that of one call (its calls run one after another).

Time. What each program computes, reads and sends per device comes from XLA's cost analysis of the
compiled program with every loop counted as often as it runs (:mod:`daca_jax.planning.hlo_cost`: the
sampler's steps, the layer stack, the μ inner updates, the grad-accumulation micro-batches); the
rollout's is one call's times ``rows / rl.rollout_batch``. On a device, a program takes the largest of
``FLOPs / (peak x MFU)``, ``bytes accessed / HBM bandwidth`` and ``collective bytes / link bandwidth``
(compute, memory and communication overlapping perfectly: a roofline), and an iteration the rollout's
plus the update's. Host work (rewards, decoding), the credit-assignment program (elementwise over the
step records) and evaluation are not in it (:mod:`daca_jax.planning.preset` lists them per preset).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax

from daca_jax import parallel
from daca_jax.config import configure
from daca_jax.parallel.mesh import check_batch_shards, mesh_shape
from daca_jax.errors import ConfigError, DoesNotFit
from daca_jax.planning import analytic
from daca_jax.planning import traffic as traffic_floors
from daca_jax.planning.compiled import build, compile_rollout, compile_update, per_device_bytes
from daca_jax.planning import targets
from daca_jax.planning.devices import DEVICES, DeviceSpec, device_spec
from daca_jax.planning.targets import Target
from daca_jax.measure import benchmarking as bm
from daca_jax.config.train import TrainConfig

GB = 1e9


def setting(cfg: TrainConfig, prompt_len: int, num_devices: int) -> dict[str, Any]:
  """The fields of ``cfg`` that shape the compiled programs, flat (what a plan record reports)."""
  m, r, rl, lik = cfg.model, cfg.rollout, cfg.rl, cfg.likelihood
  sampled = rl.prompts_per_step * (rl.sample_group_size or rl.group_size)
  return {
      "num_devices": num_devices, "strategy": cfg.parallel.strategy, "fsdp": cfg.parallel.fsdp,
      "rollout_weights": cfg.parallel.rollout_weights,
      "model": {"d_model": m.d_model, "n_layers": m.n_layers, "n_heads": m.n_heads, "n_kv_heads": m.kv_heads,
                "mlp_dim": m.mlp_dim, "vocab_size": m.vocab_size, "dtype": m.dtype, "param_dtype": m.param_dtype,
                "remat": m.remat, "lora_rank": m.lora_rank, "lora_targets": m.lora_targets if m.lora_rank else "",
                "lora_dropout": m.lora_dropout if m.lora_rank else 0.0, "logprob_chunk": m.logprob_chunk},
      "prompt_len": prompt_len, "gen_length": r.gen_length, "block_length": r.block_length, "steps": r.steps,
      "kv_cache": r.kv_cache, "threshold": r.threshold,
      "objective": rl.objective, "credit": rl.credit, "likelihood": rl.likelihood,
      "num_strata": lik.stratified.num_strata, "strata_batch": lik.strata_batch, "elbo_nodes": lik.elbo.nodes,
      "beta": rl.beta, "prompts_per_step": rl.prompts_per_step, "group_size": rl.group_size,
      "sample_group_size": rl.sample_group_size, "sampled_rows": sampled,
      "update_rows": rl.prompts_per_step * rl.group_size, "rollout_batch": rl.rollout_batch or sampled,
      "rollout_calls": sampled // rl.rollout_batch if rl.rollout_batch else 1, "grad_accum": rl.grad_accum,
      "num_iterations": rl.num_iterations, "grad_agreement": rl.grad_agreement, "rl_steps": rl.steps,
  }


def resolve_rollout_weights(cfg: TrainConfig, device: DeviceSpec | None) -> tuple[TrainConfig, list[str]]:
  """``cfg`` with ``parallel.rollout_weights="auto"`` decided for ``device`` (its memory; the run decides
  for the device it finds, :func:`daca_jax.parallel.gathers_rollout_weights`), and the line that says
  which way an FSDP rollout reads the weights and why. Other strategies and explicit values pass."""
  par = cfg.parallel
  if par.strategy != "fsdp":
    return cfg, []
  params = analytic.param_bytes(cfg.model)
  gathered = parallel.gathers_rollout_weights(par, params, None if device is None else device.hbm_bytes)
  why = (f"parallel.rollout_weights={par.rollout_weights!r}" if par.rollout_weights != "auto" else
         f"auto: the {params / GB:.1f} GB of parameters are "
         + (f"{'within' if gathered else 'over'} {parallel.ROLLOUT_GATHER_FRACTION:.0%} of {device.name}'s "
            f"{device.hbm_bytes / GB:.0f} GB" if device is not None else "planned for no device kind"))
  line = (f"rollout weights: {'gathered once per rollout call' if gathered else 'gathered per layer at every model call'}"
          f" ({why})")
  value = "gathered" if gathered else "sharded"
  return dataclasses.replace(cfg, parallel=dataclasses.replace(par, rollout_weights=value)), [line]


def plan_from_config(cfg: TrainConfig, *, prompt_len: int, num_devices: int | None = None,
                     notes: Sequence[str] = (), device: DeviceSpec | None = None,
                     target: Target | None = None, executables: dict[str, Any] | None = None,
                     token_ids: tuple[int, int] | None = None) -> dict[str, Any]:
  """Compiles ``cfg``'s rollout and update for a target (default: the current devices) and returns the
  plan record.

  Args:
    cfg: the run's configuration (validated here); its ``parallel`` section must fit the devices.
    prompt_len: P, prompt tokens of every row.
    num_devices: the devices the plan is for; must equal ``jax.device_count()`` (simulated CPU devices
      for a plan of a larger machine) or the target's; None takes the current count (the target's).
    notes: lines the record carries (what the plan could not honour, set by the caller).
    device: the device kind planned for: ``parallel.rollout_weights="auto"`` is decided for its memory
      (:func:`resolve_rollout_weights`; None: the target's kind, else as on a device that does not
      report its memory).
    target: the compiler and machine (:mod:`daca_jax.planning.targets`); a TPU or GPU target compiles
      for its compile-only devices with XLA:TPU / XLA:GPU. None: the process's own devices (XLA:CPU's
      simulated ones for a plan).
    executables: a dict that receives the compiled programs (``jax.stages.Compiled``) under ``"rollout"``
      and ``"update"`` (a preflight serialises them); None: they are dropped.
    token_ids: the run's ``(mask id, end-of-sequence id)``, constants of its programs (None: the model's
      mask id and LLaDA's EOS, which give programs of the same shapes and cost).
  Returns:
    A JSON-able dict: ``setting`` (:func:`setting`), ``param_count``, ``trainable_count``, ``rollout``
    and ``update`` (per-device ``memory`` bytes, ``compile_s``, one run's ``cost``; the rollout's
    ``calls`` per iteration and ``rows_per_call`` of its compiled program), ``state_bytes``,
    ``update_peak_bytes``, ``iteration_peak_bytes``, ``cost_per_device`` (``flops``,
    ``bytes_accessed``, ``link_bytes`` of each phase of one iteration: the rollout's calls together),
    ``traffic_per_device`` (each phase's collectives by kind and by what they move,
    :class:`daca_jax.planning.traffic.Breakdown`), ``collective_floor`` and ``hbm_floor`` (what ZeRO-3
    needs for this setting, :mod:`daca_jax.planning.traffic`),
    ``flops_per_device`` (the same FLOPs) and ``notes``.
    ``compiler`` names the compiler, its version, the device kind and the topology
    (:func:`daca_jax.planning.targets.describe`).
  Raises:
    ConfigError: a bad field (before any compile), a device count other than the process's or the
      target's, or a target whose compiler is not installed.
    DoesNotFit: the target's compiler refused a program for the memory it needs (one line naming it).
  """
  configure.validate(cfg)
  if isinstance(prompt_len, bool) or not isinstance(prompt_len, int) or prompt_len <= 0:
    raise ConfigError("prompt_len", prompt_len, "a positive integer (prompt tokens per row)")
  if target is not None and device is None:
    device = device_spec(target.device)
  compile_only = target is not None and not target.simulated
  available = target.num_devices if compile_only else jax.device_count()
  n = available if num_devices is None else num_devices
  if cfg.parallel.strategy == "none" and n != 1:
    raise ConfigError("parallel.strategy", "none", f"'fsdp' or 'pmap' on {n} devices ('none' runs on one)")
  if cfg.parallel.strategy != "none":
    data, fsdp, _ = mesh_shape(cfg.parallel, n)
    check_batch_shards(cfg.rl.prompts_per_step * cfg.rl.group_size, data, fsdp)
  if n != available:
    raise ConfigError("num_devices", n, (f"the {available} devices of --target={target.name}" if compile_only else
                      f"the {available} devices this process has (the entry point simulates num_devices CPU "
                      "devices; set it before jax is imported)"))
  if target is None:
    target = targets.target(f"cpu:{n}", device=device.name if device is not None else "h100")
  if compile_only and cfg.parallel.strategy == "none":  # one device of the target: a mesh of it places the program
    cfg = dataclasses.replace(cfg, parallel=dataclasses.replace(cfg.parallel, strategy="fsdp", fsdp=1, data=0))
    notes = [*notes, f"parallel.strategy='none' on one device of {target.name}: compiled as FSDP over that one "
             "device (the same program, placed on it)"]
  devices = targets.devices(target) if compile_only else None
  cfg, weight_notes = resolve_rollout_weights(cfg, device)
  built = build(cfg, prompt_len, devices, token_ids)
  try:
    rollout, call_rows, traj = compile_rollout(built)
    update = compile_update(built, traj)
  except DoesNotFit as e:  # the compiler itself refused a program for its memory (XLA:TPU does at compile time)
    raise DoesNotFit(f"does not fit {target.name} ({n} x {device.name if device else target.device}): {e}") from None
  if executables is not None:
    executables.update(rollout=rollout.executable, update=update.executable)
  params_b = per_device_bytes(built.params, built)
  opt_b = per_device_bytes(built.opt_state, built)
  shared_b = per_device_bytes(built.shared_base, built) if built.shared_base is not None else 0.0
  ref_b = 0.0 if cfg.model.lora_rank else params_b
  update_peak = update.memory["peak_bytes"] - shared_b
  iteration_peak = max(rollout.memory["peak_bytes"] + opt_b + ref_b, update_peak)
  costs = {"rollout": rollout.cost.scaled(built.rollout_calls), "update": update.cost.scaled(1)}
  calls = {"rollout": built.rollout_calls, "update": 1}
  traffic = {name: {k: ({kk: vv * calls[name] for kk, vv in v.items()} if isinstance(v, dict) else v * calls[name])
                    for k, v in prog.traffic.items()} for name, prog in (("rollout", rollout), ("update", update))}
  notes = list(notes) + weight_notes
  for name, prog in (("rollout", rollout), ("update", update)):
    if not prog.cost.exact_loops:
      notes.append(f"{name}: XLA's per-loop cost analysis was unavailable; every loop body is counted once "
                   "(a lower bound of its time)")
    if prog.cost.unknown_trip_loops:
      notes.append(f"{name}: {prog.cost.unknown_trip_loops} loop(s) without a known trip count counted once")
  model = cfg.model
  return {
      "compiler": targets.describe(target),
      "setting": setting(cfg, prompt_len, n),
      "param_count": analytic.param_count(model),
      "trainable_count": analytic.lora_count(model, model.lora_rank) if model.lora_rank
                         else analytic.param_count(model),
      "rollout": dict(dataclasses.asdict(rollout), calls=built.rollout_calls, rows_per_call=call_rows),
      "update": dataclasses.asdict(update),
      "state_bytes": {"params": params_b, "optimizer": opt_b, "reference": ref_b, "shared_base": shared_b},
      "update_peak_bytes": update_peak, "iteration_peak_bytes": iteration_peak,
      "cost_per_device": costs,
      "traffic_per_device": traffic,
      "collective_floor": traffic_floors.collective_floor(cfg, devices=n, rollout_calls=built.rollout_calls),
      "hbm_floor": traffic_floors.hbm_floor(cfg, devices=n, prompt_len=prompt_len, rollout_calls=built.rollout_calls,
                                            update_rows=built.update_rows, sampled_rows=built.sampled_rows),
      "flops_per_device": {k: v["flops"] for k, v in costs.items()},
      "analytic_flops_per_device": analytic_flops(cfg, prompt_len, n),
      "notes": notes,
  }


def _passes(cfg: TrainConfig) -> tuple[int, int, int]:
  """(policy passes per update, passes kept at once for the backward, positions scored per pass)."""
  k, kept, length = cfg.likelihood.stratified.num_strata, cfg.likelihood.strata_batch, cfg.rollout.gen_length
  if cfg.rl.likelihood == "stratified":
    return k, kept if 0 < kept < k else k, -(-length // k)
  return 1, 1, length


def run_plan(cfg: TrainConfig, *, prompt_len: int, num_devices: int | None = None, device: DeviceSpec | None = None,
             spec: dict[str, Any] | None = None, target: Target | None = None) -> dict[str, Any]:
  """:func:`plan_from_config` of ``cfg`` with the analytic counts it is checked against (memory and
  FLOPs of one rollout call and one micro-batch) and ``spec``, the setting as its caller names it
  (``experiments/plan.py``'s flags, :func:`daca_jax.planning.spec.spec_record`).

  Raises:
    ConfigError: from :func:`plan_from_config`, before any compile.
  """
  record = plan_from_config(cfg, prompt_len=prompt_len, num_devices=num_devices, device=device, target=target)
  n = record["setting"]["num_devices"]
  model, rcfg, rl = cfg.model, cfg.rollout, cfg.rl
  batch = rl.prompts_per_step * rl.group_size
  passes, kept, scored = _passes(cfg)
  records = rl.credit == "dps"
  est = analytic.analytic_memory(model, rcfg, batch=batch, prompt_len=prompt_len, devices=n,
                                 fsdp=cfg.parallel.strategy == "fsdp", lora_rank=model.lora_rank, passes=kept,
                                 scored_per_pass=scored, remat=model.remat, grad_agreement=rl.grad_agreement,
                                 records=records)
  return dict(record, spec=dict(spec or {}), analytic=dataclasses.asdict(est))


def analytic_flops(cfg: TrainConfig, prompt_len: int, devices: int) -> dict[str, float]:
  """The dense-transformer FLOPs per device of one iteration's rollout (every call) and update (its μ
  inner updates), from the architecture (:mod:`daca_jax.planning.analytic`): what a plan's counted FLOPs
  are checked against (attention's and the sampler's own work make the counted ones a few % higher)."""
  model, rcfg, rl = cfg.model, cfg.rollout, cfg.rl
  rows = rl.prompts_per_step * (rl.sample_group_size or rl.group_size)
  batch = rl.prompts_per_step * rl.group_size
  passes, _, scored = _passes(cfg)
  seq = prompt_len + rcfg.gen_length
  rollout = bm.rollout_flops(model, rcfg, rows, prompt_len, rcfg.steps, records=rl.credit == "dps")
  update = rl.num_iterations * analytic.update_flops(
      model, batch=batch, seq=seq, passes=passes, scored=scored, lora=bool(model.lora_rank), remat=model.remat,
      reference=rl.beta > 0, old_policy_passes=0) + (rl.num_iterations - 1) * passes * bm.forward_flops(
      model, batch, seq)
  return {"rollout": rollout / devices, "update": update / devices}


def assess(record: dict[str, Any], device: DeviceSpec, *, mfu: float, usable_fraction: float) -> dict[str, Any]:
  """Fit and predicted seconds of a plan record on ``device`` at ``mfu`` (0 < mfu <= 1).

  Returns ``{phase}_compute_s``, ``{phase}_memory_s``, ``{phase}_link_s`` and ``{phase}_s`` (their
  maximum) for the rollout and the update, ``iteration_s``, ``run_s`` (``rl.steps`` iterations, when the
  record has them), ``fits`` and the peak. Records written before ``cost_per_device`` existed (analytic
  FLOPs and FSDP gather bytes) are read as they were predicted then: no memory-bandwidth term.
  """
  peak = device.peak_bf16_flops * mfu
  out = {"device": device.name, "mfu": mfu, "usable_fraction": usable_fraction,
         "hbm_gb": device.hbm_bytes / GB, "iteration_peak_gb": record["iteration_peak_bytes"] / GB,
         "fits": record["iteration_peak_bytes"] <= usable_fraction * device.hbm_bytes}
  total = 0.0
  for phase in ("rollout", "update"):
    if "cost_per_device" in record:
      c = record["cost_per_device"][phase]
      flops, nbytes, link = c["flops"], c["bytes_accessed"], c["link_bytes"]
    else:
      flops, nbytes, link = record["flops_per_device"][phase], 0.0, record["fsdp_gather_bytes_per_device"][phase]
    out[f"{phase}_compute_s"] = flops / peak
    out[f"{phase}_memory_s"] = nbytes / device.hbm_bytes_per_s
    out[f"{phase}_link_s"] = link / device.link_bytes_per_s
    out[f"{phase}_s"] = max(out[f"{phase}_compute_s"], out[f"{phase}_memory_s"], out[f"{phase}_link_s"])
    total += out[f"{phase}_s"]
  out["iteration_s"] = total
  steps = record.get("setting", {}).get("rl_steps")
  if steps:
    out["run_s"] = steps * total
  return out


def compare_rows(record: dict[str, Any]) -> list[list[Any]]:
  """(quantity, compiled GB, analytic GB, note) rows of a :func:`run_plan` record: where the compiled
  program and the analytic count differ."""
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


__all__ = ["DEVICES", "assess", "compare_rows", "plan_from_config", "run_plan", "setting"]
