"""A paper preset trained from a random LLaDA checkpoint, next to its plan (experiments/scripts/gpu_check.sh).

  # an 8B-shaped random LLaDA-8B-Instruct folder (16 GB of bf16 weights and a stand-in tokenizer)
  python experiments/preset_check.py --write_checkpoint=/tmp/llada8b --size=8b
  # the measured iteration of a train.py run next to plan.py's prediction for the same setting
  python experiments/preset_check.py --plan_json=plan.json --workdir=runs/check --device=h200 [--json=out.json]

Library: daca_jax/planning/preset_check.py.
"""

import pathlib
import time

from absl import flags

from daca_jax.errors import ConfigError
from daca_jax.io_utils import atomic_write_json, check_file_path, read_json
from daca_jax.run import cli_errors
from daca_jax.run.cli_errors import reported_errors

_WRITE = flags.DEFINE_string("write_checkpoint", "", "Write a random LLaDA checkpoint folder here.")
_SIZE = flags.DEFINE_string("size", "8b", "Its size: a key of daca_jax.planning.preset_check.SIZES (8b, tiny).")
_PLAN = flags.DEFINE_string("plan_json", "", "A plan record (experiments/plan.py --json) to compare with.")
_WORKDIR = flags.DEFINE_string("workdir", "", "The train.py run of the same setting (its metrics.jsonl).")
_DEVICE = flags.DEFINE_string("device", "h200", "Device kind of the prediction (daca_jax/hardware.py).")
_MFU = flags.DEFINE_float("mfu", 0.4, "MFU of the prediction.")
_USABLE = flags.DEFINE_float("usable_fraction", 0.9, "Fraction of device memory the plan may use.")
_JSON = flags.DEFINE_string("json", "", "Write the comparison here.")


def main(argv):
  del argv
  with reported_errors():
    _run()


def _run():
  from daca_jax.planning import preset_check

  if _WRITE.value:
    if _SIZE.value not in preset_check.SIZES:
      raise ConfigError("--size", _SIZE.value, f"one of {sorted(preset_check.SIZES)}")
    t0 = time.perf_counter()
    folder = preset_check.write_random_llada(_WRITE.value, _SIZE.value)
    size = sum(f.stat().st_size for f in folder.iterdir()) / 1e9
    print(f"wrote {folder} ({size:.2f} GB) in {time.perf_counter() - t0:.1f} s", flush=True)
    return
  if not (_PLAN.value and _WORKDIR.value):
    raise ConfigError("--plan_json/--workdir", (_PLAN.value, _WORKDIR.value),
                      "both (or --write_checkpoint=DIR)")
  if _JSON.value:
    check_file_path(_JSON.value, "--json")
  from daca_jax.planning.devices import device_spec
  from daca_jax.run.metrics import format_table, read_metrics

  plan = read_json(_PLAN.value, fix="give a plan record written by experiments/plan.py --json (--plan_json)")
  if not isinstance(plan.get("flops_per_device"), dict):
    raise ConfigError("--plan_json", _PLAN.value, "a plan record of one setting (experiments/plan.py --json, "
                      "not a sweep's results)")
  out = preset_check.compare(plan, read_metrics(pathlib.Path(_WORKDIR.value) / "metrics.jsonl"),
                             device_spec(_DEVICE.value), mfu=_MFU.value, usable=_USABLE.value)
  print(f"\npaper preset from a random checkpoint: plan ({_DEVICE.value}, MFU {_MFU.value}) vs the last "
        "iteration of the run without compilation")
  print(format_table(out["rows"], ["quantity", "predicted", "measured"]))
  if _JSON.value:
    atomic_write_json(_JSON.value, {k: v for k, v in out.items() if k != "rows"})


if __name__ == "__main__":
  cli_errors.run(main)  # a bad flag: `error: <one line>`, exit 2
