"""Peak host memory of the checkpoint loader against the checkpoint's size.

  python experiments/loader_memory.py --checkpoint=/ckpt/LLaDA-8B-Instruct
  python experiments/loader_memory.py --write_to=/tmp/llada_1gb   # a random ~1 GB LLaDA-shaped checkpoint

Prints one JSON line (:func:`daca_jax.measure.loader_memory.measure`).
"""
import json


from absl import app, flags

from daca_jax.measure.loader_memory import measure

_CKPT = flags.DEFINE_string("checkpoint", "", "An existing LLaDA / Dream checkpoint folder.")
_WRITE = flags.DEFINE_string("write_to", "", "Write a random LLaDA-shaped bf16 checkpoint here first.")
_D, _LAYERS = flags.DEFINE_integer("d_model", 1024, "Its d_model."), flags.DEFINE_integer("n_layers", 32, "Its layers.")
_VOCAB = flags.DEFINE_integer("vocab", 32768, "Its vocabulary.")
_DTYPE = flags.DEFINE_string("param_dtype", "bfloat16", "The dtype the parameters are held in.")
_FSDP = flags.DEFINE_integer("fsdp", 1, "> 1: simulated CPU devices the parameters are FSDP-sharded over.")


def main(argv):
  del argv
  folder = _CKPT.value
  if _WRITE.value:
    from daca_jax.models.random_checkpoint import LLADA_8B_CONFIG, write_random_checkpoint

    d = _D.value
    hf = dict(LLADA_8B_CONFIG, d_model=d, n_layers=_LAYERS.value, n_heads=d // 128, n_kv_heads=d // 128,
              mlp_hidden_size=3 * d, vocab_size=_VOCAB.value, embedding_size=_VOCAB.value,
              mask_token_id=_VOCAB.value - 1, eos_token_id=_VOCAB.value - 2, pad_token_id=_VOCAB.value - 2)
    folder = str(write_random_checkpoint(_WRITE.value, hf))
  if not folder:
    raise app.UsageError("give --checkpoint or --write_to")
  print(json.dumps(measure(folder, param_dtype=_DTYPE.value, fsdp=_FSDP.value)))


if __name__ == "__main__":
  app.run(main)
