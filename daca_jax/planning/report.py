"""Text of plan records: the console report of one plan and the markdown tables of the sweeps.

:func:`describe` prints what ``experiments/plan.py`` shows for one record; :func:`paper_table` renders a
results file of :func:`paper_record` entries (``docs/results/paper_plan.json``) as markdown,
:func:`sweep_table` one of ``--sweep`` records (``docs/results/plan_results.json``); :func:`render_file`
either.
"""
from __future__ import annotations

import pathlib
from typing import Any, Iterable, Sequence

from daca_jax.errors import DataError
from daca_jax.io_utils import read_json
from daca_jax.planning.devices import DEVICES, DeviceSpec, device_spec
from daca_jax.planning.plan import GB, assess, compare_rows
from daca_jax.run.metrics import format_table


def _headline(record: dict[str, Any]) -> str:
  s = record["setting"]
  m = s["model"]
  lora = f"LoRA r {m['lora_rank']} ({m['lora_targets']})" if m["lora_rank"] else "full fine-tuning"
  lik = s["likelihood"] + (f" K {s['num_strata']}" if s["likelihood"] == "stratified" else "") + (
      f" nodes {s['elbo_nodes']}" if s["likelihood"] == "elbo" else "")
  return (f"{record['param_count']:,} parameters (d_model {m['d_model']}, {m['n_layers']} layers, vocab "
          f"{m['vocab_size']}, {m['param_dtype']}), {lora}, remat {m['remat']}; {s['num_devices']} devices, "
          f"{s['strategy']}" + (f" (fsdp {s['fsdp']})" if s["strategy"] == "fsdp" else "") + "\n"
          f"rollout: {s['sampled_rows']} rows (P {s['prompt_len']} + L {s['gen_length']}, block "
          f"{s['block_length']}, {s['steps']} steps, kv_cache {s['kv_cache']}, threshold {s['threshold']}) in "
          f"{s['rollout_calls']} call(s) of {s['rollout_batch']}; update: {s['update_rows']} rows "
          f"({s['prompts_per_step']} prompts x G {s['group_size']}), mu {s['num_iterations']} inner updates "
          f"of {s['grad_accum']} micro-batch(es), {s['objective']} / {s['credit']} / {lik}, beta {s['beta']}")


def describe(record: dict[str, Any], *, mfu: float, usable: float,
             devices: Iterable[DeviceSpec] | None = None) -> str:
  """The console report of a plan record: programs, costs, the fit and predicted time on each device
  kind of ``devices`` (default all) and the record's notes."""
  lines = [_headline(record)]
  rows = []
  for name in ("rollout", "update"):
    m = record[name]["memory"]
    rows.append([name, m["argument_bytes"] / GB, m["output_bytes"] / GB, m["temp_bytes"] / GB,
                 m["peak_bytes"] / GB, record[name]["compile_s"]])
  lines.append(format_table(rows, ["program (per device)", "arguments GB", "outputs GB", "temporaries GB",
                                   "peak GB", "compile s"]))
  lines.append(f"iteration peak per device: {record['iteration_peak_bytes'] / GB:.2f} GB (rollout + resident "
               "optimizer/reference, or the update; LoRA's shared base counted once)")
  rows = []
  for name in ("rollout", "update"):
    c = record["cost_per_device"][name]
    once = record[name]["cost"]["xla_flops_once"] * (record[name].get("calls", 1))
    rows.append([name, c["flops"] / 1e12, once / 1e12, c["bytes_accessed"] / GB, c["link_bytes"] / GB])
  lines.append("per device per iteration, from XLA's cost analysis of the compiled programs (every loop counted):")
  lines.append(format_table(rows, ["program", "TFLOP", "TFLOP (loop bodies once)", "bytes accessed GB",
                                   "collectives GB"]))
  if "traffic_per_device" in record:
    lines.append(traffic_table(record))
  if "analytic" in record:
    lines.append(format_table(compare_rows(record), ["compiled vs analytic", "compiled GB", "analytic GB", "note"]))
  rows = []
  for dev in (DEVICES.values() if devices is None else devices):
    a = assess(record, dev, mfu=mfu, usable_fraction=usable)
    rows.append([dev.name, a["hbm_gb"], "yes" if a["fits"] else "no", a["rollout_compute_s"], a["rollout_memory_s"],
                 a["rollout_link_s"], a["update_compute_s"], a["update_memory_s"], a["update_link_s"],
                 a["iteration_s"], a.get("run_s", float("nan")) / 3600])
  lines.append(f"prediction at MFU {mfu} (compute) / HBM bandwidth (bytes) / link bandwidth (collectives), the "
               "largest of each program's three; not a measurement:")
  lines.append(format_table(rows, ["device", "HBM GB", f"fits ({usable:.0%})", "rollout compute s", "memory s",
                                   "link s", "update compute s", "memory s", "link s", "s / iteration",
                                   "h / run (rl.steps)"]))
  if record.get("notes"):
    lines.append("what the plan does not take as configured:")
    lines += [f"  - {n}" for n in record["notes"]]
  return "\n".join(lines)


def traffic_table(record: dict[str, Any]) -> str:
  """What each program's collectives move per iteration next to ZeRO-3's floor, and XLA's bytes accessed
  next to the analytic HBM estimate (:mod:`daca_jax.planning.traffic`)."""
  rows = []
  for name in ("rollout", "update"):
    t, floor, hbm = record["traffic_per_device"][name], record["collective_floor"][name], record["hbm_floor"][name]
    by = t["by_what"]
    total = sum(t["by_op"].values())
    device_total = total - t["weights_upcast"] / 2  # what a bf16 program would move
    per_gather = floor["weights"] / floor["weight_gathers"] if floor["weight_gathers"] else 0.0
    gathers = (by["weights"] - t["weights_upcast"] / 2) / per_gather if per_gather else 0.0
    rows.append([name, total / GB, by["weights"] / GB, t["weights_upcast"] / 2 / GB, by["gradients"] / GB,
                 by["activations"] / GB, by["logits"] / GB, gathers, floor["weight_gathers"], floor["total"] / GB,
                 device_total / max(floor["total"], 1.0), record["cost_per_device"][name]["bytes_accessed"] / GB,
                 hbm["total"] / GB])
  return "\n".join([
      "collectives per device per iteration by what they move, next to ZeRO-3's floor for this setting "
      "(the model's weights gathered once per model pass, gradients reduce-scattered once per micro-batch). "
      "'upcast': bytes only the CPU compiler's float32 copies of bf16 weights add; 'model gathers': the "
      "weights' bytes in whole-model gathers; 'x floor': collectives without the upcast over the floor. "
      "Bytes accessed: XLA's count next to an analytic estimate (weights per pass, kept activations, logits, unfused attention scores):",
      format_table(rows, ["program", "collectives GB", "weights GB", "of which upcast GB", "gradients GB",
                          "activations GB", "logits GB", "model gathers", "floor gathers", "floor GB",
                          "x floor", "bytes accessed GB", "analytic bytes GB"])])


# The paper table's columns: (title, device kind, device count).
PAPER_TARGETS = (("8x H100-80GB", "h100", 8), ("v5p-8 (4 chips)", "v5p", 4))


def paper_record(preset: str, device: str, record: dict[str, Any]) -> dict[str, Any]:
  """One entry of the paper results file: the preset name, the device kind planned for and the plan."""
  return {"preset": preset, "device": device, "plan": record}


def _bound(a: dict[str, Any], phase: str) -> str:
  """Which of a program's three times is its predicted time."""
  return max(("compute", "memory", "link"), key=lambda k: a[f"{phase}_{k}_s"])


def _cell(entry: dict[str, Any], mfu: float, usable: float) -> str:
  r = entry["plan"]
  a = assess(r, device_spec(entry["device"]), mfu=mfu, usable_fraction=usable)
  verdict = "fits" if a["fits"] else "**does not fit**"
  return (f"{verdict}, {a['iteration_peak_gb']:.1f} GB, **{a['iteration_s']:.1f} s** (rollout "
          f"{a['rollout_s']:.1f} {_bound(a, 'rollout')} + update {a['update_s']:.1f} {_bound(a, 'update')}); "
          f"run {a.get('run_s', float('nan')) / 3600:.0f} h")


def paper_table(data: dict[str, Any], *, mfu: float, usable: float,
                targets: Sequence[tuple[str, str, int]] = PAPER_TARGETS) -> str:
  """Markdown table of a paper results file: one row per preset, one column per target; each cell the
  fit, peak GB per device and predicted seconds per RL iteration."""
  entries = data["entries"]
  presets = list(dict.fromkeys(e["preset"] for e in entries))
  first = entries[0]["plan"]["setting"] if entries else {}
  lines = [f"Predicted by `python experiments/plan.py --config=configs/paper.py:<preset>` from the programs "
           f"compiled for simulated CPU devices, not measured; MFU {mfu} assumed, fits = iteration peak <= "
           f"{usable:.0%} of HBM; P {first.get('prompt_len', '?')} prompt tokens; FSDP over all devices; "
           "LLaDA-8B shape. Cells: fit, peak GB per device, **s per RL iteration** (rollout + update, each "
           "with the bound that sets its time: compute at that MFU, memory = XLA's bytes accessed / HBM "
           "bandwidth, link = collective bytes / link bandwidth), and the run's rl.steps iterations in hours "
           "(evaluation excluded). The CPU compiler upcasts bf16 matmul operands to float32, so the memory "
           "and link terms and the peak can be up to twice a GPU's or TPU's.", "",
           "| preset | setting | " + " | ".join(t[0] for t in targets) + " |",
           "|---" * (2 + len(targets)) + "|"]
  for preset in presets:
    cells, setting = [], ""
    for _, dev, n in targets:
      match = [e for e in entries if e["preset"] == preset and e["device"] == dev
               and e["plan"]["setting"]["num_devices"] == n]
      cells.append(_cell(match[0], mfu, usable) if match else "not compiled")
      if match and not setting:
        s = match[0]["plan"]["setting"]
        setting = (f"{s['update_rows']} rows, mu {s['num_iterations']}, accum {s['grad_accum']}, rollout "
                   f"{s['rollout_calls']}x{s['rollout_batch']}, {s['credit']}/{s['likelihood']}, LoRA r "
                   f"{s['model']['lora_rank']}")
        fast = [f"kv_cache {s['kv_cache']}" if s.get("kv_cache", "none") != "none" else "",
                f"threshold {s['threshold']}" if s.get("threshold", 0.0) else ""]
        setting += "".join(f", {f}" for f in fast if f)
    lines.append(f"| {preset} | {setting} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


# docs/scaling.md's columns: (title, device kind, the compiled device count it reads).
TABLE_DEVICES = (("8x H100-80GB", "h100", 8), ("8x H200-141GB", "h200", 8), ("v5p-8 (4 chips)", "v5p", 4),
                 ("v5e-8", "v5e", 8), ("16x H100 (2 nodes)", "h100", 16), ("v5p-32 (16 chips)", "v5p", 16),
                 ("64x H100 (8 nodes)", "h100", 64), ("v5p-128 (64 chips)", "v5p", 64))


def _best(recs: Sequence[dict[str, Any]], device: DeviceSpec, mfu: float, usable: float
          ) -> tuple[dict[str, Any], dict[str, Any]]:
  """(record, assessment) of the fastest setting that fits; when none does, the one closest to fitting."""
  rated = [(r, assess(r, device, mfu=mfu, usable_fraction=usable)) for r in recs]
  return max(rated, key=lambda ra: (ra[1]["fits"], -ra[1]["iteration_s"] if ra[1]["fits"]
                                    else -ra[1]["iteration_peak_gb"]))


def sweep_table(data: dict[str, Any], *, mfu: float, usable: float) -> str:
  """docs/scaling.md's table (markdown) of a ``--sweep`` results file."""
  lines = [f"Predicted from programs compiled for simulated CPU devices (`python experiments/plan.py "
           f"--sweep`), not measured. B {data['batch']} sequences per iteration; MFU {mfu} assumed; "
           f"fits = iteration peak <= {usable:.0%} of HBM. Cells: the fastest compiled setting that fits "
           f"(else the smallest), its peak GB per device and predicted s per RL iteration (sb: "
           f"likelihood.strata_batch).", "",
           "| method | fine-tune | " + " | ".join(c[0] for c in TABLE_DEVICES) + " |",
           "|---" * (2 + len(TABLE_DEVICES)) + "|"]
  for method in ("daca", "d1"):
    for rank in (0, 128):
      cells = []
      for _, dev, n in TABLE_DEVICES:
        recs = [r for r in data["records"] if r["spec"]["method"] == method and r["spec"]["lora_rank"] == rank
                and r["spec"]["num_devices"] == n]
        if not recs:
          cells.append("not compiled")
          continue
        r, a = _best(recs, device_spec(dev), mfu, usable)
        s = r["spec"]
        setting = f"{s['strategy']} remat {s['remat']}" + (f" sb {s['strata_batch']}" if method == "daca" else "")
        setting += ", rollout per-layer gathers" if s.get("rollout_weights") == "sharded" else ""
        verdict = "fits" if a["fits"] else "**does not fit**"
        cells.append(f"{verdict}: {setting}, {a['iteration_peak_gb']:.1f} GB, {a['iteration_s']:.0f} s")
      name = "DACA-GRPO (dps, SML K 4)" if method == "daca" else "d1 (uniform, mean-field)"
      lines.append(f"| {name} | {'full (FSDP)' if rank == 0 else f'LoRA r {rank}'} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


_RESULTS_FIX = "give a file written by experiments/plan.py --sweep or --paper_sweep (--json)"


def render_file(path: str | pathlib.Path, *, mfu: float, usable: float) -> str:
  """The markdown table of a results file: :func:`paper_table` of ``--paper_sweep`` entries, else
  :func:`sweep_table` of ``--sweep`` records.

  Raises:
    FileNotFoundError: no such file.
    DataError: not JSON, or not an object with an ``entries`` or ``records`` list (the file named).
  """
  data = read_json(path, fix=_RESULTS_FIX, kind=None)
  if not isinstance(data, dict) or not isinstance(data.get("entries", data.get("records")), list):
    raise DataError(f"{path}: not a plan sweep's results (expected an object with an 'entries' or a 'records' "
                    f"list); {_RESULTS_FIX}")
  return (paper_table if "entries" in data else sweep_table)(data, mfu=mfu, usable=usable)


__all__ = ["PAPER_TARGETS", "TABLE_DEVICES", "describe", "paper_record", "paper_table", "render_file",
           "sweep_table", "traffic_table"]
