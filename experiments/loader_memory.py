"""Peak host memory of the checkpoint loader against the checkpoint's size.

  python experiments/loader_memory.py --checkpoint=/ckpt/LLaDA-8B-Instruct
  python experiments/loader_memory.py --write_to=/tmp/llada_1gb   # a random ~1 GB LLaDA-shaped checkpoint

Prints one JSON line (:func:`daca_jax.measure.loader_memory.measure`).
"""
import json


from absl import flags

from daca_jax.errors import ConfigError
from daca_jax.io_utils import check_dir_path
from daca_jax.measure.loader_memory import measure
from daca_jax.run import cli_errors
from daca_jax.run.cli_errors import reported_errors

_CKPT = flags.DEFINE_string("checkpoint", "", "An existing LLaDA / Dream checkpoint folder.")
_WRITE = flags.DEFINE_string("write_to", "", "Write a random LLaDA-shaped bf16 checkpoint here first.")
_D, _LAYERS = flags.DEFINE_integer("d_model", 1024, "Its d_model."), flags.DEFINE_integer("n_layers", 32, "Its layers.")
_VOCAB = flags.DEFINE_integer("vocab", 32768, "Its vocabulary.")
_DTYPE = flags.DEFINE_string("param_dtype", "bfloat16", "The dtype the parameters are held in.")
_FSDP = flags.DEFINE_integer("fsdp", 1, "> 1: simulated CPU devices the parameters are FSDP-sharded over.")


def main(argv):
  del argv
  with reported_errors():  # bad input, a full disk: `error: <one line>`
    _run()


def _run():
  if not (_CKPT.value or _WRITE.value):
    raise ConfigError("--checkpoint/--write_to", "", "a checkpoint folder to read or one to write first")
  folder = _CKPT.value
  if _WRITE.value:
    check_dir_path(_WRITE.value, "--write_to")
    from daca_jax.models.random_checkpoint import LLADA_8B_CONFIG, write_random_checkpoint

    d = _D.value
    hf = dict(LLADA_8B_CONFIG, d_model=d, n_layers=_LAYERS.value, n_heads=d // 128, n_kv_heads=d // 128,
              mlp_hidden_size=3 * d, vocab_size=_VOCAB.value, embedding_size=_VOCAB.value,
              mask_token_id=_VOCAB.value - 1, eos_token_id=_VOCAB.value - 2, pad_token_id=_VOCAB.value - 2)
    folder = str(write_random_checkpoint(_WRITE.value, hf))
  print(json.dumps(measure(folder, param_dtype=_DTYPE.value, fsdp=_FSDP.value)))


if __name__ == "__main__":
  cli_errors.run(main)  # a bad flag: `error: <one line>`, exit 2
