"""Import a local Hugging Face LLaDA or Dream checkpoint into the Flax NNX parameters.

A checkpoint directory holds ``config.json``, the weights as ``model.safetensors`` or as shards listed
in ``model.safetensors.index.json``, and ``tokenizer.json`` (read by
:class:`daca_jax.tasks.hf_tokenizer.HFTokenizer`). Two families are understood:

* **LLaDA** (``GSAI-ML/LLaDA-8B-*``, OLMo-style names, ``model_type`` "llada"): tensors
  ``model.transformer.wte``, ``blocks.N.{attn_norm, q_proj, k_proj, v_proj, attn_out, ff_norm,
  ff_proj, up_proj, ff_out}``, ``ln_f`` and the untied head ``model.transformer.ff_out``. In LLaDA's
  Llama block ``ff_proj`` is the SiLU-gated branch and ``up_proj`` the linear one.
* **Dream** (``Dream-org/Dream-v0-*-7B``, Qwen2 names, ``model_type`` "Dream"): ``model.embed_tokens``,
  ``model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm,
  mlp.{gate,up,down}_proj}``, ``model.norm``, ``lm_head``; q/k/v carry biases (``qkv_bias``) and the
  logits are shifted one position (``shift_logits``: Dream predicts token i at position i - 1).

Torch ``Linear`` weights are ``[out, in]`` and become ``[in, out]`` kernels; per-layer tensors are stacked
on the leading layer axis of the scanned blocks. Shards are opened lazily (``safetensors.safe_open``)
one tensor at a time, converted to the parameter dtype on the host (bf16 checkpoints included) and
only the finished stacked arrays are placed on the device.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import pathlib
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from daca_jax.errors import ConfigError, DataError
from daca_jax.models.llada import Params, Transformer
from daca_jax.types import DTYPES, ModelConfig

log = logging.getLogger(__name__)

# (path in the nnx state, HF tensor name with {i} for the layer, transpose torch [out, in] -> [in, out])
_LLADA_NAMES = (
    (("embed", "embedding"), "model.transformer.wte.weight", False),
    (("layers", "attn_norm", "scale"), "model.transformer.blocks.{i}.attn_norm.weight", False),
    (("layers", "q_proj", "kernel"), "model.transformer.blocks.{i}.q_proj.weight", True),
    (("layers", "k_proj", "kernel"), "model.transformer.blocks.{i}.k_proj.weight", True),
    (("layers", "v_proj", "kernel"), "model.transformer.blocks.{i}.v_proj.weight", True),
    (("layers", "o_proj", "kernel"), "model.transformer.blocks.{i}.attn_out.weight", True),
    (("layers", "mlp_norm", "scale"), "model.transformer.blocks.{i}.ff_norm.weight", False),
    (("layers", "gate_proj", "kernel"), "model.transformer.blocks.{i}.ff_proj.weight", True),
    (("layers", "up_proj", "kernel"), "model.transformer.blocks.{i}.up_proj.weight", True),
    (("layers", "down_proj", "kernel"), "model.transformer.blocks.{i}.ff_out.weight", True),
    (("final_norm", "scale"), "model.transformer.ln_f.weight", False),
    (("lm_head", "kernel"), "model.transformer.ff_out.weight", True),
)
_DREAM_NAMES = (
    (("embed", "embedding"), "model.embed_tokens.weight", False),
    (("layers", "attn_norm", "scale"), "model.layers.{i}.input_layernorm.weight", False),
    (("layers", "q_proj", "kernel"), "model.layers.{i}.self_attn.q_proj.weight", True),
    (("layers", "q_proj", "bias"), "model.layers.{i}.self_attn.q_proj.bias", False),
    (("layers", "k_proj", "kernel"), "model.layers.{i}.self_attn.k_proj.weight", True),
    (("layers", "k_proj", "bias"), "model.layers.{i}.self_attn.k_proj.bias", False),
    (("layers", "v_proj", "kernel"), "model.layers.{i}.self_attn.v_proj.weight", True),
    (("layers", "v_proj", "bias"), "model.layers.{i}.self_attn.v_proj.bias", False),
    (("layers", "o_proj", "kernel"), "model.layers.{i}.self_attn.o_proj.weight", True),
    (("layers", "mlp_norm", "scale"), "model.layers.{i}.post_attention_layernorm.weight", False),
    (("layers", "gate_proj", "kernel"), "model.layers.{i}.mlp.gate_proj.weight", True),
    (("layers", "up_proj", "kernel"), "model.layers.{i}.mlp.up_proj.weight", True),
    (("layers", "down_proj", "kernel"), "model.layers.{i}.mlp.down_proj.weight", True),
    (("final_norm", "scale"), "model.norm.weight", False),
    (("lm_head", "kernel"), "lm_head.weight", True),
)
NAME_MAPS = {"llada": _LLADA_NAMES, "dream": _DREAM_NAMES}


@dataclasses.dataclass(frozen=True)
class ImportReport:
  """What :func:`load_hf_checkpoint` read.

  Attributes:
    family: "llada" or "dream".
    loaded: number of checkpoint tensors used.
    unexpected: checkpoint tensors that no parameter uses (also logged as a warning).
  """

  family: str
  loaded: int
  unexpected: tuple[str, ...]


def hf_family(hf: Mapping[str, Any]) -> str:
  """"llada" or "dream" from a parsed ``config.json``.

  Raises:
    ConfigError: neither family (the message lists what was found).
  """
  kind = str(hf.get("model_type", "")).lower()
  arch = [str(a).lower() for a in hf.get("architectures") or []]
  if kind == "llada" or "lladamodellm" in arch or "d_model" in hf:
    return "llada"
  if kind == "dream" or "dreammodel" in arch:
    return "dream"
  raise ConfigError("config.json:model_type", hf.get("model_type"),
                    f"a LLaDA ('llada') or Dream ('Dream') checkpoint (architectures={hf.get('architectures')})")


def _require(hf: Mapping[str, Any], key: str, allowed: Any) -> None:
  if key in hf and hf[key] != allowed:
    raise ConfigError(f"config.json:{key}", hf[key], f"{allowed!r} (the only variant this model implements)")


def config_from_hf(hf: Mapping[str, Any], **overrides: Any) -> ModelConfig:
  """Builds the :class:`ModelConfig` of a parsed HF ``config.json`` (LLaDA or Dream).

  Args:
    hf: the parsed ``config.json``.
    **overrides: ModelConfig fields to set on top (e.g. ``dtype="bfloat16"``, ``remat="full"``,
      ``lora_rank=8``, or ``mask_token_id`` when the config lacks it).
  Raises:
    ConfigError: an unknown family, a variant the model does not implement (biases, non-SwiGLU MLP,
      LayerNorm, ALiBi), or no mask token id.
  """
  family = hf_family(hf)
  if family == "llada":
    for key, allowed in (("include_bias", False), ("block_type", "llama"), ("activation_type", "silu"),
                         ("layer_norm_type", "rms"), ("alibi", False), ("rope", True),
                         ("attention_layer_norm", False), ("include_qkv_bias", False)):
      _require(hf, key, allowed)
    n_heads = int(hf["n_heads"])
    fields = dict(vocab_size=int(hf.get("embedding_size") or hf["vocab_size"]), d_model=int(hf["d_model"]),
                  n_layers=int(hf["n_layers"]), n_heads=n_heads,
                  n_kv_heads=int(hf.get("n_kv_heads") or n_heads), mlp_dim=int(hf["mlp_hidden_size"]),
                  rope_theta=float(hf.get("rope_theta", 10000.0)),
                  norm_eps=float(hf.get("rms_norm_eps", 1e-5)),
                  tie_embeddings=bool(hf.get("weight_tying", False)))
  else:
    _require(hf, "hidden_act", "silu")
    if hf.get("rope_scaling"):
      raise ConfigError("config.json:rope_scaling", hf["rope_scaling"], "null (plain RoPE)")
    n_heads = int(hf["num_attention_heads"])
    fields = dict(vocab_size=int(hf["vocab_size"]), d_model=int(hf["hidden_size"]),
                  n_layers=int(hf["num_hidden_layers"]), n_heads=n_heads,
                  n_kv_heads=int(hf.get("num_key_value_heads") or n_heads),
                  mlp_dim=int(hf["intermediate_size"]), rope_theta=float(hf.get("rope_theta", 10000.0)),
                  norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
                  tie_embeddings=bool(hf.get("tie_word_embeddings", False)), qkv_bias=True,
                  shift_logits=True)
  if hf.get("mask_token_id") is not None:
    fields["mask_token_id"] = int(hf["mask_token_id"])
  fields.update(overrides)
  if "mask_token_id" not in fields:
    raise ConfigError("config.json:mask_token_id", None, "a mask token id (pass mask_token_id=...)")
  return ModelConfig(**fields).validate()


def _open_tensors(ckpt: pathlib.Path) -> dict[str, pathlib.Path]:
  """HF tensor name -> shard file, from the index or the single ``model.safetensors``."""
  index = ckpt / "model.safetensors.index.json"
  if index.exists():
    weight_map = json.loads(index.read_text()).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
      raise DataError(f"{index}: no 'weight_map' of tensor names to shard files")
    return {name: ckpt / shard for name, shard in weight_map.items()}
  single = ckpt / "model.safetensors"
  if not single.exists():
    raise DataError(f"{ckpt}: neither model.safetensors.index.json nor model.safetensors found")
  from safetensors import safe_open

  with safe_open(str(single), framework="numpy") as f:
    return {name: single for name in f.keys()}


class _ShardReader:
  """Reads one tensor at a time as host numpy, keeping each shard open once (lazy, memory-mapped)."""

  def __init__(self, files: Mapping[str, pathlib.Path]):
    self.files = files
    self.open: dict[pathlib.Path, Any] = {}

  def shape(self, name: str) -> tuple[int, ...]:
    return tuple(self._handle(name).get_slice(name).get_shape())

  def read(self, name: str) -> np.ndarray:
    # The "flax" framework understands bf16 (numpy alone does not); tensors land on the host CPU.
    return np.asarray(self._handle(name).get_tensor(name))

  def _handle(self, name: str) -> Any:
    from safetensors import safe_open

    path = self.files[name]
    if path not in self.open:
      if not path.exists():
        raise DataError(f"shard {path} listed for tensor {name!r} does not exist")
      self.open[path] = safe_open(str(path), framework="flax", device="cpu")
    return self.open[path]


def load_hf_checkpoint(path: str | pathlib.Path, **overrides: Any
                       ) -> tuple[ModelConfig, nnx.GraphDef, Params, ImportReport]:
  """Reads a local LLaDA or Dream checkpoint directory into ``(cfg, graphdef, params, report)``.

  ``params`` is an ``nnx.State`` like :func:`daca_jax.models.init_model`'s, in ``cfg.param_dtype``
  (float32 unless overridden, e.g. ``param_dtype="bfloat16"`` for an 8B model on one device), ready
  for :func:`daca_jax.models.make_logits_fn(graphdef)`.

  Args:
    path: the checkpoint directory.
    **overrides: ModelConfig fields set on top of ``config.json`` (see :func:`config_from_hf`).
  Raises:
    DataError: a missing file, a tensor the model needs that the checkpoint lacks, or a tensor whose
      shape differs (the message names the tensor, the expected and the found shape).
    ConfigError: an unsupported config (see :func:`config_from_hf`).
  """
  ckpt = pathlib.Path(path)
  cfg_file = ckpt / "config.json"
  if not cfg_file.exists():
    raise DataError(f"{ckpt}: no config.json (expected a Hugging Face checkpoint directory)")
  hf = json.loads(cfg_file.read_text())
  family = hf_family(hf)
  cfg = config_from_hf(hf, **overrides)
  pdt = np.dtype(DTYPES[cfg.param_dtype])
  abstract = nnx.eval_shape(lambda: Transformer(cfg, nnx.Rngs(0)))
  graphdef, abstract_state = nnx.split(abstract, nnx.Param)
  pure = nnx.to_pure_dict(abstract_state)
  reader = _ShardReader(_open_tensors(ckpt))
  used: set[str] = set()

  def fetch(name: str, want: tuple[int, ...], transpose: bool) -> np.ndarray:
    if name not in reader.files:
      raise DataError(f"{ckpt}: tensor {name!r} is missing from the checkpoint (expected shape "
                      f"{want if not transpose else want[::-1]})")
    found = reader.shape(name)
    expect = want[::-1] if transpose else want
    if found != expect:
      raise DataError(f"{ckpt}: tensor {name!r} has shape {found}, expected {expect} "
                      f"(model {cfg.n_layers} layers, d_model {cfg.d_model}, vocab {cfg.vocab_size})")
    used.add(name)
    x = reader.read(name)
    return (x.T if transpose else x).astype(pdt)

  for key, template, transpose in NAME_MAPS[family]:
    node = pure
    for k in key[:-1]:
      node = node.get(k) if isinstance(node, dict) else None
    if not isinstance(node, dict) or key[-1] not in node:
      continue  # a parameter this config does not have (tied head, no biases)
    want = tuple(node[key[-1]].shape)
    if key[0] == "layers":
      out = np.empty(want, pdt)
      for i in range(cfg.n_layers):
        out[i] = fetch(template.format(i=i), want[1:], transpose)
    else:
      out = fetch(template, want, transpose)
    node[key[-1]] = out
  left = [jax.tree_util.keystr(p) for p, v in jax.tree_util.tree_flatten_with_path(pure)[0]
          if not isinstance(v, np.ndarray)]
  if left:
    raise DataError(f"{ckpt}: no checkpoint tensor maps to model parameters {left}")
  unexpected = tuple(sorted(set(reader.files) - used))
  if unexpected:
    log.warning("%s: %d checkpoint tensors unused by the model: %s", ckpt, len(unexpected),
                list(unexpected[:10]))
  nnx.replace_by_pure_dict(abstract_state, jax.tree.map(jnp.asarray, pure))
  return cfg, graphdef, abstract_state, ImportReport(family, len(used), unexpected)
