"""Random-weight checkpoints in a family's Hugging Face layout, of any size (memory measurements of the
loader, GPU checks of an 8B-shaped run on a machine that cannot download the weights).

The folder holds ``config.json`` (the given config, e.g. LLaDA-8B-Instruct's with other sizes), one
safetensors shard per layer plus one for the embedding, final norm and head, and
``model.safetensors.index.json``, as :mod:`daca_jax.models.checkpoint_loader` reads them. Tensors are
generated and written one shard at a time, so writing never holds more than one layer on the host.
No tokenizer is written (the caller adds one when a run needs it).
"""
from __future__ import annotations

import json
import pathlib
from typing import Any, Mapping

import numpy as np

from daca_jax.models.checkpoint_loader import INDEX_FILE, NAME_MAPS, hf_tensor_shapes
from daca_jax.config.model import llada_8b_config
from daca_jax.models.hf_import import config_from_hf, hf_family

_STORAGE = {"bfloat16": "bfloat16", "float32": "float32", "float16": "float16"}

# GSAI-ML/LLaDA-8B-Instruct's config.json: its sizes are daca_jax.config.model.llada_8b_config's (the one statement
# of the released shapes); the other keys as the released file sets them (tests/models/test_hf_import.py:
# LLADA_CFG, which also holds this file's import equal to llada_8b_config()).
_LLADA = llada_8b_config()
LLADA_8B_CONFIG = {
    "model_type": "llada", "architectures": ["LLaDAModelLM"], "d_model": _LLADA.d_model, "n_layers": _LLADA.n_layers,
    "n_heads": _LLADA.n_heads, "n_kv_heads": _LLADA.n_kv_heads, "mlp_hidden_size": _LLADA.mlp_dim, "mlp_ratio": 4,
    "vocab_size": _LLADA.vocab_size, "embedding_size": _LLADA.vocab_size, "rope_theta": _LLADA.rope_theta,
    "rms_norm_eps": _LLADA.norm_eps, "weight_tying": _LLADA.tie_embeddings, "include_bias": False,
    "include_qkv_bias": _LLADA.qkv_bias, "bias_for_layer_norm": False, "block_type": "llama", "block_group_size": 1,
    "activation_type": "silu", "layer_norm_type": "rms", "layer_norm_with_affine": True, "rope": True,
    "rope_full_precision": True, "alibi": False, "attention_layer_norm": False, "input_emb_norm": False,
    "scale_logits": False, "attention_dropout": 0.0, "residual_dropout": 0.0, "embedding_dropout": 0.0,
    "max_sequence_length": 4096, "mask_token_id": _LLADA.mask_token_id, "eos_token_id": 126081,
    "pad_token_id": 126081, "torch_dtype": _LLADA.dtype,
}


def _fast_bf16(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
  """bfloat16 values of random sign, exponent 2**-7 or 2**-6 and mantissa: magnitudes uniform in
  log-scale over [2**-7, 2**-5) (std ~0.018), from one random uint16 per value (~20x faster than normal
  draws; an 8B model's 16 GB in seconds)."""
  import ml_dtypes

  bits = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)
  # keep the sign (bit 15), the exponent's lowest bit (7) and the mantissa (0-6); 0x3C00 sets the
  # exponent's bits to 120 = 2**-7 (121 where bit 7 was drawn)
  np.bitwise_and(bits, np.uint16(0x80FF), out=bits)
  np.bitwise_or(bits, np.uint16(0x3C00), out=bits)
  return bits.view(ml_dtypes.bfloat16)


def write_random_checkpoint(folder: str | pathlib.Path, hf_config: Mapping[str, Any], *, dtype: str = "bfloat16",
                            seed: int = 0, std: float = 0.02, fill: str = "normal") -> pathlib.Path:
  """Writes a checkpoint of ``hf_config`` (a LLaDA or Dream ``config.json`` dict) with random weights
  (norm scales 1) stored in ``dtype``; returns the folder.

  ``fill="normal"``: N(0, std) weights. ``fill="fast"`` (bfloat16 only): random bit patterns of
  magnitude in [2**-7, 2**-5) (:func:`_fast_bf16`), for sizes where drawing normals takes minutes
  (timing and memory checks, whose results do not depend on the values).

  Raises:
    ConfigError: ``hf_config`` is not a config this library implements (:func:`config_from_hf`).
    ValueError: an unknown ``dtype`` or ``fill``, or ``fill="fast"`` with a dtype other than bfloat16.
  """
  import ml_dtypes
  from safetensors.numpy import save_file

  if dtype not in _STORAGE:
    raise ValueError(f"dtype={dtype!r}: one of {sorted(_STORAGE)}")
  if fill not in ("normal", "fast") or (fill == "fast" and dtype != "bfloat16"):
    raise ValueError(f"fill={fill!r} with dtype={dtype!r}: 'normal', or 'fast' with bfloat16")
  np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
  cfg = config_from_hf(hf_config)
  family = hf_family(hf_config)
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  shapes = hf_tensor_shapes(cfg)
  rng = np.random.default_rng(seed)
  names = [(k, t) for k, t, _ in NAME_MAPS[family] if k in shapes]
  n_shards = cfg.n_layers + 1
  weight_map = {}

  def value(key: tuple[str, ...]) -> np.ndarray:
    shape = shapes[key][0]
    if key[-1] == "scale":
      return np.ones(shape, np_dtype)
    if fill == "fast":
      return _fast_bf16(rng, shape)
    return (rng.standard_normal(shape, np.float32) * std).astype(np_dtype)

  for shard in range(n_shards):
    fname = f"model-{shard + 1:05d}-of-{n_shards:05d}.safetensors"
    if shard < cfg.n_layers:
      part = {t.format(i=shard): value(k) for k, t in names if k[0] == "layers"}
    else:
      part = {t: value(k) for k, t in names if k[0] != "layers"}
    save_file(part, str(folder / fname))
    weight_map.update({name: fname for name in part})
  total = sum(int(np.prod(shapes[k][0])) * (cfg.n_layers if k[0] == "layers" else 1) for k, _ in names)
  meta = {"total_size": total * np.dtype(np_dtype).itemsize}
  (folder / INDEX_FILE).write_text(json.dumps({"metadata": meta, "weight_map": weight_map}, indent=1))
  (folder / "config.json").write_text(json.dumps(dict(hf_config), indent=1))
  return folder
