"""One whole RL iteration at LLaDA-8B width on the devices at hand, measured next to plan.py's prediction.

  python experiments/iteration_check.py --device=h200 [--lora_rank=0] [--json=$OUT/iteration.json]
  python experiments/iteration_check.py --model=tiny --device=v5e   # CPU: the same code path, tiny

Random bf16 weights, random prompts. First the plan (:mod:`daca_jax.planning`) compiles the rollout and
the update for these devices with this backend's compiler, from shapes; when full fine-tuning does not
fit ``--device``'s memory the run switches to LoRA (``--fallback_lora_rank``). Then it allocates the
model, runs the rollout, the likelihood passes (one jitted call of the estimator) and one update, and
prints, per phase, the measured seconds and MFU next to the predicted ones, and the allocator's peak
bytes (GPU/TPU; 'n/a' on CPU) next to the compiled peak. Used by experiments/scripts/gpu_check.sh.
"""

from absl import flags

from configs import paper
from daca_jax.io_utils import atomic_write_json, check_file_path
from daca_jax.planning import iteration
from daca_jax.planning.devices import device_spec
from daca_jax.run import cli_errors
from daca_jax.run.cli_errors import reported_errors

_MODEL = flags.DEFINE_string("model", "llada_8b", "A key of daca_jax.planning.spec.MODELS.")
_LAYERS = flags.DEFINE_integer("layers", 0, "Override the model's layer count (0: all).")
_DEVICE = flags.DEFINE_string("device", "h200", "Device kind of the prediction (daca_jax/hardware.py).")
_METHOD = flags.DEFINE_string("method", "daca", "A key of daca_jax.planning.spec.METHODS.")
_LORA = flags.DEFINE_integer("lora_rank", 0, "0: full fine-tuning (LoRA when it does not fit).")
_FALLBACK = flags.DEFINE_integer("fallback_lora_rank", 128, "LoRA rank used when full fine-tuning does not fit.")
_PROMPTS = flags.DEFINE_integer("prompts_per_step", 1, "Prompts per step (B = prompts x group_size).")
_GROUP = flags.DEFINE_integer("group_size", 8, "G.")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 64, "Prompt tokens.")
_GEN = flags.DEFINE_integer("gen_length", 256, "L.")
_BLOCK = flags.DEFINE_integer("block_length", 32, "Block length.")
_STEPS = flags.DEFINE_integer("steps", 128, "Sampler steps.")
_REMAT = flags.DEFINE_string("remat", "full", "model.remat.")
_STRATA_BATCH = flags.DEFINE_integer("strata_batch", 0, "likelihood.strata_batch.")
_MFU = flags.DEFINE_float("mfu", 0.4, "MFU of the prediction.")
_USABLE = flags.DEFINE_float("usable_fraction", 0.9, "Fraction of device memory the plan may use.")
_JSON = flags.DEFINE_string("json", "", "Write predicted and measured figures here.")


def main(argv):
  del argv
  with reported_errors():
    _run()


def _run():
  from daca_jax.measure import benchmarking as bm

  if _JSON.value:
    check_file_path(_JSON.value, "--json")  # written at the end: a folder there is refused up front
  dev = device_spec(_DEVICE.value, "--device")
  cfg, record, pred, note = iteration.plan_iteration(
      paper.get_config, dev, mfu=_MFU.value, usable=_USABLE.value, fallback_lora_rank=_FALLBACK.value,
      prompts_per_device=_PROMPTS.value, model=_MODEL.value, layers=_LAYERS.value, method=_METHOD.value,
      group_size=_GROUP.value, prompt_len=_PROMPT_LEN.value, gen_length=_GEN.value, block_length=_BLOCK.value,
      steps=_STEPS.value, lora_rank=_LORA.value, remat=_REMAT.value, strata_batch=_STRATA_BATCH.value)
  if note:
    print(note, flush=True)
  measured = iteration.measure_iteration(cfg, _PROMPT_LEN.value)
  peak_bytes = bm.device_peak_bytes()
  print(iteration.iteration_report(record, pred, measured, device=dev, mfu=_MFU.value, peak_bytes=peak_bytes))
  if _JSON.value:
    atomic_write_json(_JSON.value, {"spec": record["spec"], "predicted": pred, "measured": measured,
                                    "allocator_peak_bytes": peak_bytes, "plan": record})


if __name__ == "__main__":
  cli_errors.run(main)  # a bad flag: `error: <one line>`, exit 2
