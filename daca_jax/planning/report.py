"""Text of plan records: the console report of one plan and the markdown tables of the sweeps.

:func:`describe` prints what ``experiments/plan.py`` shows for one record; :func:`paper_table` renders a
results file of :func:`paper_record` entries (``docs/results/paper_plan.json``) as markdown,
:func:`sweep_table` one of ``--sweep`` records (``docs/results/plan_results.json``); :func:`render_file`
either.
"""
from __future__ import annotations

import pathlib
import re
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


def compiler_line(record: dict[str, Any]) -> str:
  """Which compiler produced a record's programs, for which machine (records from before targets: XLA:CPU)."""
  c = record.get("compiler")
  if not c:
    return "compiled by XLA:CPU for simulated CPU devices"
  if not c.get("compile_only"):
    return f"compiled by XLA:CPU ({c['compiler_version']}) for {c['num_devices']} simulated CPU devices"
  return (f"compiled by {c['compiler']} ({c['compiler_version']}) for {c['target']}: {c['num_devices']} "
          f"{c['device_kind']} devices on {c['hosts']} host(s), topology {c['topology']} (compile-only devices)")


def _counted_by(record: dict[str, Any]) -> str:
  costs = [record[p]["cost"] for p in ("rollout", "update")]
  if all(c.get("counter", "xla") == "xla" for c in costs):
    return "from XLA's cost analysis of the compiled programs (every loop counted)"
  return ("counted by the library over the compiled programs' optimized HLO (daca_jax.planning.hlo_count, every "
          "loop counted); 'XLA, loops once' is the compiler's own count where it gives one, 'ours, loops once' "
          "the same count taken the same way")


def describe(record: dict[str, Any], *, mfu: float, usable: float,
             devices: Iterable[DeviceSpec] | None = None) -> str:
  """The console report of a plan record: programs, costs, the fit and predicted time on each device
  kind of ``devices`` (default all) and the record's notes."""
  lines = [compiler_line(record), _headline(record)]
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
  own = any(record[p]["cost"].get("counter", "xla") != "xla" for p in ("rollout", "update"))
  for name in ("rollout", "update"):
    c, cost = record["cost_per_device"][name], record[name]["cost"]
    calls = record[name].get("calls", 1)
    once = cost["xla_flops_once"] * calls
    row = [name, c["flops"] / 1e12, once / 1e12 if once else "none"]
    if own:
      row.append(cost["own_once"]["flops"] * calls / 1e12)
    ana = record.get("analytic_flops_per_device", {}).get(name)
    row.append(ana / 1e12 if ana else "n/a")
    rows.append(row + [c["bytes_accessed"] / GB, c["link_bytes"] / GB])
  lines.append(f"per device per iteration, {_counted_by(record)}; 'analytic': the dense-transformer count:")
  lines.append(format_table(rows, ["program", "TFLOP", "TFLOP (XLA, loops once)"] + (["(ours, loops once)"] if own else [])
                            + ["analytic TFLOP", "bytes accessed GB", "collectives GB"]))
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


# The paper table's machines: (title, the target compiled for with its own compiler, and the device kind and
# count of the CPU plan beside it).
PAPER_TARGETS = (("8x H100-80GB", "gpu:h100x8", "h100", 8), ("v5p-8 (4 chips)", "tpu:v5p-8", "v5p", 4))
# Larger slices the paper table's DACA preset is also compiled for (a table of their own), each with the
# fields that spread the preset over the slice: a batch every device holds rows of, micro-batches of whole
# groups that split over the devices (rl.grad_accum 1: 96 or 768 rows allow no other) and one rollout call
# (a v5e chip cannot hold the gathered model, so its rollout gathers each layer at every model call: fewer
# calls, fewer gathers). A v5p-64 (32 chips) keeps the preset's 96 rows, 3 per chip; a v5e-256 (256 chips)
# needs 768 (128 prompts x 6), 3 per chip.
PAPER_SCALE = ("d1_gsm8k_daca", (("tpu:v5p-64", {"rl.rollout_batch": 96, "rl.grad_accum": 1}),
                                 ("tpu:v5e-256", {"rl.prompts_per_step": 128, "rl.rollout_batch": 768,
                                                  "rl.grad_accum": 1})))


def entry_target(entry: dict[str, Any]) -> str:
  """The target of a paper results entry (entries written before targets are CPU plans: ``cpu:<N>``)."""
  return entry.get("target") or f"cpu:{entry['plan']['setting']['num_devices']}"


def paper_record(preset: str, device: str, record: dict[str, Any], target: str = "") -> dict[str, Any]:
  """One entry of the paper results file: the preset name, the device kind planned for, the target
  compiled for (``cpu:<N>`` for a CPU plan) and the plan."""
  return {"preset": preset, "device": device, "target": target or f"cpu:{record['setting']['num_devices']}",
          "plan": record}


def _bound(a: dict[str, Any], phase: str) -> str:
  """Which of a program's three times is its predicted time."""
  return max(("compute", "memory", "link"), key=lambda k: a[f"{phase}_{k}_s"])


def _cell(entry: dict[str, Any], mfu: float, usable: float) -> str:
  r = entry["plan"]
  a = assess(r, device_spec(entry["device"]), mfu=mfu, usable_fraction=usable)
  verdict = "fits" if a["fits"] else "**does not fit**"
  link = sum(r["cost_per_device"][p]["link_bytes"] for p in ("rollout", "update")) / 1e12
  compute = a["rollout_compute_s"] + a["update_compute_s"]
  return (f"{verdict}, {a['iteration_peak_gb']:.1f} GB, {link:.2f} TB, **{a['iteration_s']:.1f} s** "
          f"({a['iteration_s'] / compute:.2f}x compute; rollout {a['rollout_s']:.1f} {_bound(a, 'rollout')} + "
          f"update {a['update_s']:.1f} {_bound(a, 'update')}); run {a.get('run_s', float('nan')) / 3600:.0f} h")


def _find(entries: Sequence[dict[str, Any]], preset: str, target: str) -> dict[str, Any] | None:
  return next((e for e in entries if e["preset"] == preset and entry_target(e) == target), None)


def _setting(s: dict[str, Any]) -> str:
  setting = (f"{s['update_rows']} rows, mu {s['num_iterations']}, accum {s['grad_accum']}, rollout "
             f"{s['rollout_calls']}x{s['rollout_batch']}, {s['credit']}/{s['likelihood']}, LoRA r "
             f"{s['model']['lora_rank']}, remat {s['model']['remat']}")
  fast = [f"kv_cache {s['kv_cache']}" if s.get("kv_cache", "none") != "none" else "",
          f"threshold {s['threshold']}" if s.get("threshold", 0.0) else ""]
  return setting + "".join(f", {f}" for f in fast if f)


def paper_table(data: dict[str, Any], *, mfu: float, usable: float,
                targets: Sequence[tuple[str, str, str, int]] = PAPER_TARGETS) -> str:
  """Markdown tables of a paper results file: one row per preset; per machine of ``targets`` a column
  compiled by the machine's own compiler (XLA:GPU, XLA:TPU) and one compiled for simulated CPU devices.
  Each cell: fit, peak GB per device, collectives TB per device per iteration, predicted seconds per RL
  iteration and its ratio to the compute time. Then the larger slices of :data:`PAPER_SCALE`."""
  entries = data["entries"]
  presets = list(dict.fromkeys(e["preset"] for e in entries))
  first = entries[0]["plan"]["setting"] if entries else {}
  header = ["preset", "setting"]
  for title, target, _, n in targets:
    header += [f"{title}: {_compiler_name(target)}", f"{title}: CPU plan (cpu:{n})"]
  lines = [f"Predicted by `python experiments/plan.py --config=configs/paper.py:<preset> --target=<machine>` "
           f"from the programs XLA compiled for that machine (XLA:GPU, XLA:TPU: compile-only devices), beside "
           f"the same preset compiled for simulated CPU devices; not measured. MFU {mfu} assumed, fits = "
           f"iteration peak <= {usable:.0%} of HBM; P {first.get('prompt_len', '?')} prompt tokens; FSDP over "
           "all devices; LLaDA-8B shape. Cells: fit, peak GB per device, collectives TB per device per "
           "iteration, **s per RL iteration** (its ratio to the compute time at that MFU; rollout + update, each "
           "with the bound that sets its time: compute, memory = bytes accessed / HBM bandwidth, link = "
           "collective bytes / link bandwidth), and the run's rl.steps iterations in hours (evaluation "
           "excluded).", "", "| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
  for preset in presets:
    cells, setting = [], ""
    for _, target, dev, n in targets:
      for name in (target, f"cpu:{n}"):
        match = _find(entries, preset, name)
        if name.startswith("cpu:") and match is not None and match["device"] != dev:
          match = None
        cells.append(_cell(match, mfu, usable) if match else "not compiled")
        if match and not setting:
          setting = _setting(match["plan"]["setting"])
    lines.append(f"| {preset} | {setting} | " + " | ".join(cells) + " |")
  preset, larger = PAPER_SCALE
  found = [(t, fields, _find(entries, preset, t)) for t, fields in larger]
  if any(e for _, _, e in found):
    lines += ["", f"`{preset}` on larger slices, compiled by XLA:TPU, with the fields that spread it over the "
              "slice at its per-device load:", "", "| target | devices | fields changed | setting | cell |",
              "|---|---|---|---|---|"]
    for t, fields, e in found:
      changed = ", ".join(f"`{k}={v}`" for k, v in fields.items())
      if e is None:
        lines.append(f"| {t} | | {changed} | | not compiled |")
        continue
      lines.append(f"| {t} | {e['plan']['setting']['num_devices']} | {changed} | {_setting(e['plan']['setting'])} "
                   f"| {_cell(e, mfu, usable)} |")
  return "\n".join(lines)


def _compiler_name(target: str) -> str:
  return {"tpu": "XLA:TPU", "gpu": "XLA:GPU", "cpu": "XLA:CPU"}[target.split(":")[0]]


# docs/scaling.md's columns: (title, device kind, the compiled device count it reads).
TABLE_DEVICES = (("8x H100-80GB", "h100", 8), ("8x H200-141GB", "h200", 8), ("v5p-8 (4 chips)", "v5p", 4),
                 ("v5e-8", "v5e", 8), ("16x H100 (2 nodes)", "h100", 16), ("v5p-32 (16 chips)", "v5p", 16),
                 ("64x H100 (8 nodes)", "h100", 64), ("v5p-128 (64 chips)", "v5p", 64))
# The same columns compiled by each machine's own compiler (a --sweep of targets): title -> target.
TABLE_TARGETS = {"8x H100-80GB": "gpu:h100x8", "8x H200-141GB": "gpu:h200x8", "v5p-8 (4 chips)": "tpu:v5p-8",
                 "v5e-8": "tpu:v5e-8", "16x H100 (2 nodes)": "gpu:h100x16", "v5p-32 (16 chips)": "tpu:v5p-32",
                 "64x H100 (8 nodes)": "gpu:h100x64", "v5p-128 (64 chips)": "tpu:v5p-128"}


def _best(recs: Sequence[dict[str, Any]], device: DeviceSpec, mfu: float, usable: float
          ) -> tuple[dict[str, Any], dict[str, Any]]:
  """(record, assessment) of the fastest setting that fits; when none does, the one closest to fitting (a
  setting the compiler refused for its memory is the farthest)."""
  rated = [(r, {"fits": False, "iteration_peak_gb": float("inf"), "iteration_s": float("inf")} if "refused" in r
            else assess(r, device, mfu=mfu, usable_fraction=usable)) for r in recs]
  return max(rated, key=lambda ra: (ra[1]["fits"], -ra[1]["iteration_s"] if ra[1]["fits"]
                                    else -ra[1]["iteration_peak_gb"]))


def sweep_table(data: dict[str, Any], *, mfu: float, usable: float) -> str:
  """docs/scaling.md's table (markdown) of a ``--sweep`` results file: records compiled for each column's
  machine by its own compiler (``spec["target"]``), or (``--cpu_sweep``) for simulated CPU devices."""
  by_target = any(r["spec"].get("target") for r in data["records"])
  how = ("compiled for each machine by its own compiler, XLA:GPU or XLA:TPU (`python experiments/plan.py "
         "--sweep`)" if by_target else "compiled for simulated CPU devices (`python experiments/plan.py --cpu_sweep`)")
  lines = [f"Predicted from programs {how}, not measured. B {data['batch']} sequences per iteration; MFU {mfu} "
           f"assumed; fits = iteration peak <= {usable:.0%} of HBM. Cells: the fastest compiled setting that fits "
           f"(else the smallest), its peak GB per device and predicted s per RL iteration (sb: "
           f"likelihood.strata_batch).", "",
           "| method | fine-tune | " + " | ".join(c[0] for c in TABLE_DEVICES) + " |",
           "|---" * (2 + len(TABLE_DEVICES)) + "|"]
  for method in ("daca", "d1"):
    for rank in (0, 128):
      cells = []
      for title, dev, n in TABLE_DEVICES:
        recs = [r for r in data["records"] if r["spec"]["method"] == method and r["spec"]["lora_rank"] == rank
                and (r["spec"].get("target") == TABLE_TARGETS[title] if by_target
                     else r["spec"]["num_devices"] == n and not r["spec"].get("target"))]
        if not recs:
          cells.append("not compiled")
          continue
        r, a = _best(recs, device_spec(dev), mfu, usable)
        s = r["spec"]
        setting = f"{s['strategy']} remat {s['remat']}" + (f" sb {s['strata_batch']}" if method == "daca" else "")
        setting += ", rollout per-layer gathers" if s.get("rollout_weights") == "sharded" else ""
        if "refused" in r:
          cells.append(f"**does not fit**: {setting}, refused by the compiler ({_refused(r['refused'])})")
          continue
        verdict = "fits" if a["fits"] else "**does not fit**"
        cells.append(f"{verdict}: {setting}, {a['iteration_peak_gb']:.1f} GB, {a['iteration_s']:.0f} s")
      name = "DACA-GRPO (dps, SML K 4)" if method == "daca" else "d1 (uniform, mean-field)"
      lines.append(f"| {name} | {'full (FSDP)' if rank == 0 else f'LoRA r {rank}'} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def _refused(line: str) -> str:
  """The compiler's own figures from a refusal line (``... the total memory required for HLO temporaries
  (16.20G) exceeds available HBM (15.75G)``), else its text after the program's name."""
  m = re.search(r"\(([\d.]+)G\) exceeds available HBM \(([\d.]+)G\)", line)
  if m:
    return f"temporaries {m.group(1)} GB > {m.group(2)} GB of HBM"
  m = re.search(r"Used ([\d.]+)G of ([\d.]+)G hbm", line)
  if m:
    return f"{m.group(1)} GB > {m.group(2)} GB of HBM"
  return line.split("refuses to compile it: ", 1)[-1][:120]


_RESULTS_FIX = "give a file written by experiments/plan.py --sweep, --cpu_sweep or --paper_sweep (--json)"


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


__all__ = ["PAPER_SCALE", "PAPER_TARGETS", "TABLE_DEVICES", "TABLE_TARGETS", "compiler_line", "describe", "entry_target", "paper_record",
           "paper_table", "render_file",
           "sweep_table", "traffic_table"]
