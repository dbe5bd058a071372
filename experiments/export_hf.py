"""Write a trained policy in the layout of the Hugging Face checkpoint its run started from (logic:
:mod:`daca_jax.run.export`, :mod:`daca_jax.models.hf_export`).

  # the merged model (LoRA folded in float32, cast to the source dtype), loadable like the source:
  python experiments/export_hf.py --workdir=runs/d1_gsm8k --output_dir=exports/d1_gsm8k
  # the LoRA adapters alone, for peft.PeftModel.from_pretrained(<source model>, DIR):
  python experiments/export_hf.py --workdir=runs/d1_gsm8k --output_dir=exports/d1_gsm8k_lora --adapter_only

The output folder appears only when complete (written under a hidden temporary name, then renamed).
"""


from absl import flags, logging

from daca_jax.run import cli_errors
from daca_jax.run.cli_errors import reported_errors
from daca_jax.run.export import export_workdir, parse_shard_size

_WORKDIR = flags.DEFINE_string("workdir", None, "Workdir of experiments/train.py (a run from model.init_checkpoint).")
_OUT = flags.DEFINE_string("output_dir", None, "Export folder: absent or empty (or an earlier export of the same "
                           "run, with --overwrite); never inside the workdir or the source.")
_PHASE = flags.DEFINE_enum("phase", "latest", ["latest", "rl", "sft"], "Which workdir checkpoint.")
_ADAPTER = flags.DEFINE_bool("adapter_only", False, "Write the LoRA adapters as a PEFT adapter.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace an earlier export of the same run in --output_dir.")
_SOURCE = flags.DEFINE_string("source", "", "The source checkpoint folder if it moved since training "
                              "(its fingerprint must match the run's record).")
_SHARD = flags.DEFINE_string("max_shard_size", "", "Reshard, e.g. 5GB or bytes ('' keeps the source's shards).")
flags.mark_flags_as_required(["workdir", "output_dir"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  with reported_errors():  # bad input, a changed source, a damaged checkpoint, a full disk: `error: <one line>`
    export_workdir(_WORKDIR.value, _OUT.value, phase=_PHASE.value, adapter_only=_ADAPTER.value,
                   overwrite=_OVERWRITE.value, source=_SOURCE.value,
                   max_shard_size=parse_shard_size(_SHARD.value))


if __name__ == "__main__":
  cli_errors.run(main)  # a bad flag: `error: <one line>`, exit 2
