"""Memory / time plan of an RL run (LLaDA-8B, Dream-7B or a preset's checkpoint) from compiled programs.

  # a run's own config, e.g. a paper preset: that preset's rollout and update on 8 simulated devices
  python experiments/plan.py --config=configs/paper.py:d1_gsm8k_daca --num_devices=8 --device=h100 \
      [--config.model.init_checkpoint=/ckpt/LLaDA-8B-Instruct | --model=dream_7b] \
      [--prompt_len=200 | --prompt_len_from_task] [--config.rl.rollout_batch=24 ...] [--json=plan.json]
  # the paper presets' table (each base method x arm of GSM8K on 8x H100 and v5p-8), one process each
  python experiments/plan.py --paper_sweep --json=docs/results/paper_plan.json
  python experiments/plan.py --render=docs/results/paper_plan.json
  # one PlanSpec setting (flags below); the README's table of --sweep settings
  python experiments/plan.py --model=llada_8b --device=h100 --num_devices=8 --method=daca \
      --lora_rank=0 --remat=full --strata_batch=0 [--json=plan.json]
  python experiments/plan.py --sweep --json=docs/results/plan_results.json
  python experiments/plan.py --render=docs/results/plan_results.json

With ``--config`` the architecture is ``model.init_checkpoint``'s config.json (no weights read) or
``--model``'s (default llada_8b), the device layout FSDP over ``--num_devices`` unless the config sets
one, the prompt ``--prompt_len`` tokens (default 200, d1's max_prompt_length); every other field is
compiled as configured (daca_jax/planning/preset.py), and what the plan cannot take as configured is
printed. Per device it prints the compiled arguments / outputs / temporaries / peak of the rollout and
the update, the iteration's peak (the rollout runs beside the resident optimizer state and reference
copy), the FLOPs, bytes and collective bytes XLA counts in them (every loop counted), whether the
iteration fits each device kind (``--usable_fraction`` of its memory) and the predicted seconds per RL
iteration at ``--mfu``. Every figure is a prediction from programs compiled for CPU devices: XLA's GPU
and TPU compilers fuse and schedule differently, so temporaries on the real device differ (usually
downwards: CPU keeps more f32 copies of bf16 values).
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

import dataclasses
import json
import pathlib
import subprocess
import time

from absl import app, flags
from ml_collections import config_flags

from daca_jax.errors import ConfigError
from daca_jax.io_utils import atomic_write_json
from daca_jax.planning import spec as plan_spec
from daca_jax.planning.devices import device_spec
from daca_jax.planning.preset import DEFAULT_PROMPT_LEN
from daca_jax.planning.report import PAPER_TARGETS, paper_record
from daca_jax.run.cli_errors import reported_errors

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
_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "A run's config (configs/*.py[:preset], as experiments/train.py takes it): plan that run. "
    "With it, of the PlanSpec flags only --model (architecture when no model.init_checkpoint), --device, "
    "--num_devices and --prompt_len apply.")
_TASK_P = flags.DEFINE_bool("prompt_len_from_task", False, "With --config: P is the task's prompt length with "
                             "the run's tokenizer (model.init_checkpoint's; its weights must be there), as the "
                             "run computes it, instead of --prompt_len.")
_MFU = flags.DEFINE_float("mfu", 0.4, "Model FLOP utilisation assumed for the predicted step times.")
_USABLE = flags.DEFINE_float("usable_fraction", 0.9, "Fraction of a device's memory a program may use.")
_JSON = flags.DEFINE_string("json", "", "Write the plan record(s) here (JSON).")
_SWEEP = flags.DEFINE_bool("sweep", False, "Run the README's settings (SWEEP), one process each, into --json.")
_PAPER_SWEEP = flags.DEFINE_bool("paper_sweep", False, "Plan PAPER_PRESETS on each of daca_jax.planning.report."
                                 "PAPER_TARGETS, one process each, into --json (settings already there are kept).")
_RENDER = flags.DEFINE_string("render", "", "Print the markdown table of a --sweep or --paper_sweep JSON file.")

# The README's table: (num_devices, method, lora_rank, extra spec fields). 8 devices serve the
# 8-GPU nodes and v5e-8; 4 devices are a v5p-8 slice (4 chips); 16 and 64 devices are 2 and 8 GPU
# nodes or a v5p-32 / v5p-128 slice (B 64: one sequence per device at 64).
SWEEP = ([(n, m, r, {}) for n in (8, 4) for m in ("daca", "d1") for r in (0, 128)]
         # candidates: SML keeping one stratum's activations at a time; two 8-GPU nodes / a v5p-32
         + [(n, "daca", r, {"strata_batch": 1}) for n in (8, 4) for r in (0, 128)]
         # the rollout gathering each layer per model call: for devices too small to hold the gathered
         # model beside the rest (v5e-8, whose column reads the 8-device settings planned for an H100)
         + [(8, m, r, {"rollout_weights": "sharded"}) for m in ("daca", "d1") for r in (0, 128)]
         + [(8, "daca", r, {"strata_batch": 1, "rollout_weights": "sharded"}) for r in (0, 128)]
         + [(n, m, r, {}) for n in (16, 64) for m in ("daca", "d1") for r in (0, 128)])
# Which compiled device count each table column reads.
TABLE_DEVICES = (("8x H100-80GB", "h100", 8), ("8x H200-141GB", "h200", 8), ("v5p-8 (4 chips)", "v5p", 4),
                 ("v5e-8", "v5e", 8), ("16x H100 (2 nodes)", "h100", 16), ("v5p-32 (16 chips)", "v5p", 16),
                 ("64x H100 (8 nodes)", "h100", 64), ("v5p-128 (64 chips)", "v5p", 64))
# The closing note's table: each base method and its DACA arm on GSM8K (configs/paper.py).
PAPER_PRESETS = tuple(f"{base}_gsm8k{arm}" for arm in ("", "_daca") for base in ("d1", "wd1", "gdpo"))
_ROOT = pathlib.Path(__file__).resolve().parents[1]


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
        setting += ", rollout per-layer gathers" if s.get("rollout_weights") == "sharded" else ""
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
                     {k: r["spec"][k] for k in ("strata_batch", "rollout_weights")
                      if r["spec"].get(k, "auto") not in (0, "auto")}) for r in records}
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


def paper_sweep(out: str) -> None:
  """Plans every PAPER_PRESETS x PAPER_TARGETS setting not yet in ``out``, each in its own process (a
  fresh set of simulated devices), and appends it there."""
  path = pathlib.Path(out)
  entries = json.loads(path.read_text())["entries"] if path.exists() else []
  done = {(e["preset"], e["device"], e["plan"]["setting"]["num_devices"]) for e in entries}
  for preset in PAPER_PRESETS:
    for _, dev, n in PAPER_TARGETS:
      if (preset, dev, n) in done:
        continue
      part = pathlib.Path(f"{out}.part")
      t0 = time.perf_counter()
      subprocess.run([sys.executable, __file__, f"--config={_ROOT / 'configs/paper.py'}:{preset}",
                      f"--num_devices={n}", f"--device={dev}", f"--json={part}"], check=True,
                     stdout=subprocess.DEVNULL)
      entries.append(paper_record(preset, dev, json.loads(part.read_text())))
      part.unlink()
      print(f"planned {preset} on {n}x {dev}: {time.perf_counter() - t0:.0f} s", flush=True)
      atomic_write_json(out, {"command": "python experiments/plan.py --paper_sweep --json=" + out,
                              "entries": entries})


def main(argv):
  del argv
  with reported_errors():  # bad input: `error: <field>: <value> ... allowed`, exit 2, no traceback
    _main()


def _render(path: str) -> str:
  from daca_jax.planning.report import paper_table

  data = json.loads(pathlib.Path(path).read_text())
  if "entries" in data:
    return paper_table(data, mfu=_MFU.value, usable=_USABLE.value)
  return render(path, _MFU.value, _USABLE.value)


def _plan_config():
  """The plan of --config's run (daca_jax.planning.preset)."""
  import jax

  from daca_jax.planning.plan import plan_from_config
  from daca_jax.planning.preset import resolve_plan_config, task_prompt_len

  unused = [n for n, f in _F.items() if f.present and n not in ("model", "device", "num_devices", "prompt_len")]
  if unused:
    raise ConfigError(f"--{unused[0]}", _F[unused[0]].value, "unset with --config (set the run's own field, "
                      "e.g. --config.model.lora_rank=..., --config.rl.grad_accum=...)")
  device_spec(_F["device"].value, "--device")
  if _TASK_P.value and _F["prompt_len"].present:
    raise ConfigError("--prompt_len", _F["prompt_len"].value, "unset with --prompt_len_from_task")
  given = _F["prompt_len"].present or _TASK_P.value
  prompt_len = _F["prompt_len"].value if _F["prompt_len"].present else DEFAULT_PROMPT_LEN
  n = jax.device_count()
  model = _F["model"].value if _F["model"].present else ""
  cfg, notes = resolve_plan_config(_CONFIG.value, num_devices=n, model=model, prompt_len=prompt_len,
                                   prompt_len_given=given)
  if _TASK_P.value:
    prompt_len = task_prompt_len(cfg)
    notes.append(f"prompt length {prompt_len}: task {cfg.task.name}'s with the run's tokenizer")
  return plan_from_config(cfg, prompt_len=prompt_len, num_devices=n, notes=notes,
                          device=device_spec(_F["device"].value))


def _main():
  if _RENDER.value:
    print(_render(_RENDER.value))
    return
  if _SWEEP.value or _PAPER_SWEEP.value:
    if not _JSON.value:
      raise ConfigError("--json", "", "a path for the sweep's results")
    (paper_sweep if _PAPER_SWEEP.value else sweep)(_JSON.value)
    print(_render(_JSON.value))
    return
  if not 0 < _MFU.value <= 1:
    raise ConfigError("--mfu", _MFU.value, "a fraction in (0, 1]")
  if not 0 < _USABLE.value <= 1:
    raise ConfigError("--usable_fraction", _USABLE.value, "a fraction in (0, 1]")
  import jax

  from daca_jax.planning.plan import run_plan
  from daca_jax.planning.report import describe

  if _CONFIG.value is not None:
    record = _plan_config()
  else:
    record = run_plan(plan_spec.PlanSpec(**{name: f.value for name, f in _F.items()}), jax.device_count())
  print(describe(record, mfu=_MFU.value, usable=_USABLE.value))
  if _JSON.value:
    atomic_write_json(_JSON.value, record)


if __name__ == "__main__":
  app.run(main)
