"""Memory / time plan of LLaDA-8B (or Dream-7B) RL on an accelerator, from compiled programs.

  # one setting: compiles the real rollout and update on 8 simulated CPU devices (nothing allocated)
  python experiments/plan.py --model=llada_8b --device=h100 --num_devices=8 --method=daca \
      --lora_rank=0 --remat=full --strata_batch=0 [--json=plan.json]
  # the README's table: every setting of --sweep, each in its own process, then the table
  python experiments/plan.py --sweep --json=docs/plan_results.json
  python experiments/plan.py --render=docs/plan_results.json

Per device it prints the compiled arguments / outputs / temporaries / peak of the rollout and the
update, the iteration's peak (the rollout runs beside the resident optimizer state and reference copy),
the analytic count next to it, whether the iteration fits each device kind (``--usable_fraction`` of
its memory) and the predicted seconds per RL iteration at ``--mfu``. Every figure is a prediction from
programs compiled for CPU devices: XLA's GPU and TPU compilers fuse and schedule differently, so
temporaries on the real device differ (usually downwards: CPU keeps more f32 copies of bf16 values).
"""
import os
import sys


def _simulate_devices(argv: list[str]) -> None:
  """Sets XLA_FLAGS for ``--num_devices`` simulated CPU devices; must run before jax is imported."""
  n = "8"
  for i, a in enumerate(argv):
    if a.startswith("--num_devices="):
      n = a.split("=", 1)[1]
    elif a == "--num_devices" and i + 1 < len(argv):
      n = argv[i + 1]
  if not n.isdigit() or int(n) < 1:
    sys.exit(f"--num_devices: {n!r} is not allowed; expected a positive integer")
  flags_ = os.environ.get("XLA_FLAGS", "")
  os.environ["XLA_FLAGS"] = f"{flags_} --xla_force_host_platform_device_count={n}".strip()
  os.environ.setdefault("JAX_PLATFORMS", "cpu")


if __name__ == "__main__":
  _simulate_devices(sys.argv)

import pathlib as _pathlib

sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parents[1]))
import dataclasses
import json
import pathlib
import subprocess
import time

from absl import app, flags

from daca_jax.run.cli_errors import reported_errors
from daca_jax.errors import ConfigError
from daca_jax.io_utils import atomic_write_json
from daca_jax.run.metrics import format_table
from daca_jax.planning import spec as plan_spec
from daca_jax.planning.devices import DEVICES, device_spec

_F = {}
for _field in dataclasses.fields(plan_spec.PlanSpec):
  _default = _field.default
  _help = f"PlanSpec.{_field.name} (daca_jax/planning/spec.py)."
  if isinstance(_default, bool):
    _F[_field.name] = flags.DEFINE_bool(_field.name, _default, _help)
  elif isinstance(_default, int):
    _F[_field.name] = flags.DEFINE_integer(_field.name, _default, _help)
  elif isinstance(_default, float):
    _F[_field.name] = flags.DEFINE_float(_field.name, _default, _help)
  else:
    _F[_field.name] = flags.DEFINE_string(_field.name, _default, _help)
_MFU = flags.DEFINE_float("mfu", 0.4, "Model FLOP utilisation assumed for the predicted step times.")
_USABLE = flags.DEFINE_float("usable_fraction", 0.9, "Fraction of a device's memory a program may use.")
_JSON = flags.DEFINE_string("json", "", "Write the plan record(s) here (JSON).")
_SWEEP = flags.DEFINE_bool("sweep", False, "Run the README's settings (SWEEP), one process each, into --json.")
_RENDER = flags.DEFINE_string("render", "", "Print the README table of a --sweep JSON file and exit.")

# The README's table: (num_devices, method, lora_rank, extra spec fields). 8 devices serve the
# 8-GPU nodes and v5e-8; 4 devices are a v5p-8 slice (4 chips); 16 and 64 devices are 2 and 8 GPU
# nodes or a v5p-32 / v5p-128 slice (B 64: one sequence per device at 64).
SWEEP = ([(n, m, r, {}) for n in (8, 4) for m in ("daca", "d1") for r in (0, 128)]
         # candidates: SML keeping one stratum's activations at a time; two 8-GPU nodes / a v5p-32
         + [(n, "daca", r, {"strata_batch": 1}) for n in (8, 4) for r in (0, 128)]
         + [(n, m, r, {}) for n in (16, 64) for m in ("daca", "d1") for r in (0, 128)])
# Which compiled device count each table column reads.
TABLE_DEVICES = (("8x H100-80GB", "h100", 8), ("8x H200-141GB", "h200", 8), ("v5p-8 (4 chips)", "v5p", 4),
                 ("v5e-8", "v5e", 8), ("16x H100 (2 nodes)", "h100", 16), ("v5p-32 (16 chips)", "v5p", 16),
                 ("64x H100 (8 nodes)", "h100", 64), ("v5p-128 (64 chips)", "v5p", 64))


def _spec_from_flags(**overrides) -> plan_spec.PlanSpec:
  values = {name: f.value for name, f in _F.items()}
  values.update(overrides)
  return plan_spec.PlanSpec(**values)


def _print_record(record, mfu, usable):
  from daca_jax.planning.plan import assess, compare_rows

  gb = 1e9
  s = record["spec"]
  print(f"\n== {s['model']} ({record['param_count']:,} parameters, {record['trainable_count']:,} trained) "
        f"{s['method']} on {s['num_devices']} devices, strategy {s['strategy']}, B {s['prompts_per_step']}x"
        f"{s['group_size']}, L {s['gen_length']}, remat {s['remat']}, strata_batch {s['strata_batch']}, "
        f"LoRA r {s['lora_rank']}")
  rows = []
  for name in ("rollout", "update"):
    m = record[name]["memory"]
    rows.append([name, m["argument_bytes"] / gb, m["output_bytes"] / gb, m["temp_bytes"] / gb,
                 m["peak_bytes"] / gb, record[name]["compile_s"]])
  print(format_table(rows, ["program (per device)", "arguments GB", "outputs GB", "temporaries GB",
                            "peak GB", "compile s"]))
  print(f"iteration peak per device: {record['iteration_peak_bytes'] / gb:.2f} GB (rollout + resident "
        f"optimizer/reference, or the update; LoRA's shared base counted once)")
  print(format_table(compare_rows(record), ["compiled vs analytic", "compiled GB", "analytic GB", "note"]))
  rows = []
  for dev in DEVICES.values():
    a = assess(record, dev, mfu=mfu, usable_fraction=usable)
    rows.append([dev.name, a["hbm_gb"], "yes" if a["fits"] else "no", a["rollout_compute_s"],
                 a["rollout_gather_s"], a["update_compute_s"], a["update_gather_s"], a["iteration_s"]])
  print(f"prediction at MFU {mfu} (compute) / link bandwidth (FSDP gathers), not a measurement:")
  print(format_table(rows, ["device", "HBM GB", f"fits ({usable:.0%})", "rollout s", "rollout gathers s",
                            "update s", "update gathers s", "s / iteration"]))


def render(path: str, mfu: float, usable: float) -> str:
  """The README table (markdown) of a --sweep results file."""
  from daca_jax.planning.plan import assess

  data = json.loads(pathlib.Path(path).read_text())
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
        best = None
        for r in recs:
          a = assess(r, device_spec(dev), mfu=mfu, usable_fraction=usable)
          # the fastest setting that fits; when none does, the one closest to fitting
          rank_a = (a["fits"], -a["iteration_s"] if a["fits"] else -a["iteration_peak_gb"])
          rank_b = None if best is None else (best[1]["fits"], -best[1]["iteration_s"] if best[1]["fits"]
                                              else -best[1]["iteration_peak_gb"])
          if best is None or rank_a > rank_b:
            best = (r, a)
        r, a = best
        s = r["spec"]
        setting = f"{s['strategy']} remat {s['remat']}" + (f" sb {s['strata_batch']}" if method == "daca" else "")
        verdict = "fits" if a["fits"] else "**does not fit**"
        cells.append(f"{verdict}: {setting}, {a['iteration_peak_gb']:.1f} GB, {a['iteration_s']:.0f} s")
      name = "DACA-GRPO (dps, SML K 4)" if method == "daca" else "d1 (uniform, mean-field)"
      lines.append(f"| {name} | {'full (FSDP)' if rank == 0 else f'LoRA r {rank}'} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def _sweep_key(n, method, rank, extra):
  return json.dumps([n, method, rank, sorted(extra.items())])


def sweep(out: str) -> None:
  """Compiles every SWEEP setting not yet in ``out`` (one process each) and appends it there."""
  path = pathlib.Path(out)
  records = json.loads(path.read_text())["records"] if path.exists() else []
  done = {_sweep_key(r["spec"]["num_devices"], r["spec"]["method"], r["spec"]["lora_rank"],
                     {k: r["spec"][k] for k in ("strata_batch",) if r["spec"][k]}) for r in records}
  for n, method, rank, extra in SWEEP:
    if _sweep_key(n, method, rank, extra) in done:
      continue
    args = [sys.executable, __file__, f"--num_devices={n}", f"--method={method}", f"--lora_rank={rank}",
            f"--json={out}.part"] + [f"--{k}={v}" for k, v in extra.items()]
    args += [f"--{k}={_F[k].value}" for k in ("model", "prompts_per_step", "group_size", "remat")
             if k not in extra]
    t0 = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    records.append(json.loads(pathlib.Path(out + ".part").read_text()))
    print(f"compiled {n} devices {method} LoRA {rank}: {time.perf_counter() - t0:.0f} s", flush=True)
    atomic_write_json(out, {"batch": _F["prompts_per_step"].value * _F["group_size"].value, "records": records})
  pathlib.Path(out + ".part").unlink(missing_ok=True)


def main(argv):
  del argv
  with reported_errors():  # bad input: `error: <field>: <value> ... allowed`, exit 2, no traceback
    _main()


def _main():
  if _RENDER.value:
    print(render(_RENDER.value, _MFU.value, _USABLE.value))
    return
  if _SWEEP.value:
    if not _JSON.value:
      raise ConfigError("--json", "", "a path for the sweep's results")
    sweep(_JSON.value)
    print(render(_JSON.value, _MFU.value, _USABLE.value))
    return
  if not 0 < _MFU.value <= 1:
    raise ConfigError("--mfu", _MFU.value, "a fraction in (0, 1]")
  if not 0 < _USABLE.value <= 1:
    raise ConfigError("--usable_fraction", _USABLE.value, "a fraction in (0, 1]")
  import jax

  from daca_jax.planning.plan import run_plan

  record = run_plan(_spec_from_flags(), jax.device_count())
  _print_record(record, _MFU.value, _USABLE.value)
  if _JSON.value:
    atomic_write_json(_JSON.value, record)


if __name__ == "__main__":
  app.run(main)
