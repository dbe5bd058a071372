"""Memory / time plan of an RL run (LLaDA-8B, Dream-7B or a preset's checkpoint) from compiled programs.

  # a run's own config compiled by the machine's own compiler ([tpu] / [gpu] extras; any host, no hardware)
  python experiments/plan.py --config=configs/paper.py:d1_gsm8k_daca --target=gpu:h100x8
  python experiments/plan.py --config=configs/paper.py:d1_gsm8k_daca --target=tpu:v5p-8 [--json=plan.json]
  # the same for simulated CPU devices (no extra install): --num_devices=8 --device=h100 (= --target=cpu:8)
  python experiments/plan.py --config=configs/paper.py:d1_gsm8k_daca --num_devices=8 --device=h100 \
      [--config.model.init_checkpoint=/ckpt/LLaDA-8B-Instruct | --model=dream_7b] \
      [--prompt_len=200 | --prompt_len_from_task] [--config.rl.rollout_batch=24 ...]
  # the paper presets' table (each base method x arm of GSM8K on 8x H100 and v5p-8: each machine's own
  # compiler beside its CPU plan), one process each; then the rendered table
  python experiments/plan.py --paper_sweep --json=docs/results/paper_plan.json
  python experiments/plan.py --render=docs/results/paper_plan.json
  # a flag setting (daca_jax/planning/spec.py: --method's paper preset, fields set by flags)
  python experiments/plan.py --model=llada_8b --target=tpu:v5p-8 --method=daca --lora_rank=0 --remat=full
  # docs/scaling.md's tables: each machine's own compiler (--sweep), simulated CPU devices (--cpu_sweep)
  python experiments/plan.py --sweep --json=docs/results/plan_targets.json

Targets (daca_jax/planning/targets.py): ``tpu:v5p-8|32|64|128``, ``tpu:v5e-8|256``, ``tpu:v6e-8``,
``gpu:<h100|h200|a100>xN`` and ``cpu:N``. XLA:TPU and XLA:GPU compile for compile-only devices of the
topology: per device the plan prints the compiler's arguments / outputs / temporaries / peak of the
rollout and the update, the iteration's peak (the rollout runs beside the resident optimizer state and
reference copy), the FLOPs and bytes the library counts in the optimized programs (every loop counted;
checked against the compiler's own count where it gives one) and their collectives, whether the iteration
fits (``--usable_fraction`` of the device's memory) and the predicted seconds per RL iteration at
``--mfu``. With ``--config`` the architecture is ``model.init_checkpoint``'s config.json (no weights read)
or ``--model``'s (default llada_8b), the device layout FSDP over the target's devices unless the config
sets one, the prompt ``--prompt_len`` tokens (default 200, d1's max_prompt_length); what the plan cannot
take as configured is printed. A CPU plan (``--num_devices``, ``cpu:N``) is XLA:CPU's program: it keeps
float32 copies of bf16 values and leaves attention unfused, so its peaks and memory terms run up to twice
a GPU's or TPU's. A preflight of a real run is ``experiments/train.py --compile_only --target=...``.
"""
import pathlib
import sys

from daca_jax.planning.simulate import simulate_devices

if __name__ == "__main__":
  simulate_devices(sys.argv)  # --target's compiler or --num_devices CPU devices, before jax is imported

from absl import flags
from ml_collections import config_flags

from configs import paper
from daca_jax.errors import ConfigError
from daca_jax.io_utils import atomic_write_json, check_file_path
from daca_jax.planning import spec as plan_spec, sweep, targets
from daca_jax.planning.devices import device_spec
from daca_jax.planning.report import render_file
from daca_jax.run import cli_errors
from daca_jax.run.cli_errors import reported_errors
from daca_jax.config.train import TrainConfig

_TARGET = flags.DEFINE_string("target", None, f"Compile for this machine with its own compiler: "
                              f"{targets.allowed()} (daca_jax/planning/targets.py). XLA:TPU and XLA:GPU need "
                              "the [tpu] / [gpu] extras; without --target, --num_devices CPU devices.")
_SPEC = {"model": flags.DEFINE_string("model", "llada_8b", f"Architecture: one of {sorted(plan_spec.MODELS)}."),
         "layers": flags.DEFINE_integer("layers", 0, "Layers of --model (0: its own)."),
         "device": flags.DEFINE_string("device", "h100", "Device kind planned for (daca_jax/hardware.py) with "
                                       "simulated CPU devices; a TPU / GPU --target sets its own."),
         "num_devices": flags.DEFINE_integer("num_devices", 8, "Simulated CPU devices (the mesh; --target=cpu:N)."),
         "method": flags.DEFINE_string("method", "daca", f"configs/paper.py preset: {plan_spec.METHODS}."),
         "prompt_len": flags.DEFINE_integer("prompt_len", plan_spec.TABLE_PROMPT_LEN, "Prompt tokens P "
                                            "(with --config: default 200, d1's max_prompt_length).")}
_DEFINE = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float, str: flags.DEFINE_string}
_FIELDS = {k: _DEFINE[type(plan_spec.field_value(TrainConfig(), f))](
    k, None, f"{f} (default: the --method preset's, with daca_jax/planning/spec.py TABLE_SETTING).")
    for k, f in plan_spec.FLAG_FIELDS.items()}
_FLAGS = {**_SPEC, **_FIELDS}
_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "A run's config (configs/*.py[:preset], as experiments/train.py takes it): plan that run. "
    "With it, of the flags above only --model (architecture when no model.init_checkpoint), --device, "
    "--num_devices and --prompt_len apply.")
_TASK_P = flags.DEFINE_bool("prompt_len_from_task", False, "With --config: P is the task's prompt length with "
                             "the run's tokenizer (model.init_checkpoint's; its weights must be there), as the "
                             "run computes it, instead of --prompt_len.")
_MFU = flags.DEFINE_float("mfu", 0.4, "Model FLOP utilisation assumed for the predicted step times.")
_USABLE = flags.DEFINE_float("usable_fraction", 0.9, "Fraction of a device's memory a program may use.")
_JSON = flags.DEFINE_string("json", "", "Write the plan record(s) here (JSON).")
_SWEEP = flags.DEFINE_bool("sweep", False, "Compile docs/scaling.md's settings for each machine with its own "
                           "compiler (daca_jax.planning.sweep.TARGET_SWEEP), one process each, into --json.")
_CPU_SWEEP = flags.DEFINE_bool("cpu_sweep", False, "The same settings compiled for simulated CPU devices "
                               "(daca_jax.planning.sweep.SWEEP), into --json.")
_PAPER_SWEEP = flags.DEFINE_bool("paper_sweep", False, "Plan each configs/paper.py base and its DACA arm on GSM8K "
                                 "(daca_jax.planning.sweep.paper_presets) on each of daca_jax.planning.report."
                                 "PAPER_TARGETS, one process each, into --json (settings already there are kept).")
_RENDER = flags.DEFINE_string("render", "", "Print the markdown table of a --sweep or --paper_sweep JSON file.")
_ROOT = pathlib.Path(__file__).resolve().parents[1]


def main(argv):
  del argv
  with reported_errors():  # bad input: `error: <field>: <value> ... allowed`, exit 2, no traceback
    _main()


def _main():
  if _RENDER.value:
    print(render_file(_RENDER.value, mfu=_MFU.value, usable=_USABLE.value))
    return
  if _JSON.value:
    check_file_path(_JSON.value, "--json")  # a folder there: refused before anything is compiled
  if _SWEEP.value or _CPU_SWEEP.value or _PAPER_SWEEP.value:
    if not _JSON.value:
      raise ConfigError("--json", "", "a path for the sweep's results")
    command = [sys.executable, __file__]
    if _PAPER_SWEEP.value:
      presets = sweep.paper_presets(paper.BASES, paper.NO_ARMS)
      sweep.paper_sweep(_JSON.value, command, str(_ROOT / "configs/paper.py"), presets)
    else:
      sweep.sweep(_JSON.value, command, {k: _FLAGS[k].value for k in sweep.FORWARDED if _FLAGS[k].present},
                  targets=not _CPU_SWEEP.value)
    print(render_file(_JSON.value, mfu=_MFU.value, usable=_USABLE.value))
    return
  for name, value in (("--mfu", _MFU.value), ("--usable_fraction", _USABLE.value)):
    if not 0 < value <= 1:
      raise ConfigError(name, value, "a fraction in (0, 1]")
  from daca_jax.planning.preset import check_config_flags, plan_preset
  from daca_jax.planning.report import describe

  target = _target()
  if _CONFIG.value is not None:
    check_config_flags({k: f.value for k, f in _FLAGS.items() if f.present})
    given = lambda k: _FLAGS[k].value if _FLAGS[k].present else None
    record = plan_preset(_CONFIG.value, device=_FLAGS["device"].value, model=given("model") or "",
                         prompt_len=given("prompt_len"), prompt_len_from_task=_TASK_P.value, target=target)
  else:
    values = {k: f.value for k, f in _FLAGS.items()}
    if not target.simulated:
      values.pop("num_devices")
    record = plan_spec.plan_flags(paper.get_config, target=target, **values)
  only = None if target.simulated else [device_spec(target.device)]
  print(describe(record, mfu=_MFU.value, usable=_USABLE.value, devices=only))
  if _JSON.value:
    atomic_write_json(_JSON.value, record)


def _target() -> targets.Target:
  """The target of the command: --target, else --num_devices simulated devices of kind --device."""
  if _TARGET.value is None:
    target = targets.target(f"cpu:{_FLAGS['num_devices'].value}", device=_FLAGS["device"].value)
    targets.check_process(target.name, "--num_devices")
    return target
  targets.check_process(_TARGET.value)
  target = targets.target(_TARGET.value, device=_FLAGS["device"].value)
  if not target.simulated and _FLAGS["device"].present and _FLAGS["device"].value.lower() != target.device:
    raise ConfigError("--device", _FLAGS["device"].value, f"unset with --target={target.name} (its device is "
                      f"{target.device})")
  return target


if __name__ == "__main__":
  cli_errors.run(main)  # a bad flag: `error: <one line>`, exit 2
