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

Every field of each family's reference config class is accounted for (:data:`LLADA_FIELDS`,
:data:`DREAM_FIELDS`): absent keys take the reference default, values not implemented are refused
with a ``ConfigError`` naming the field. ``tokenizer.json`` next to the weights sets
``ModelConfig.vocab_limit`` (the sampler never proposes an id the tokenizer cannot decode), and Dream's
``pad_token_id`` becomes ``left_pad_id`` (left padding kept out of attention, as Dream's
``diffusion_generate`` does; LLaDA attends to pads as its ``generate`` does).

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
    (("layers", "q_proj", "bias"), "model.transformer.blocks.{i}.q_proj.bias", False),  # include_qkv_bias
    (("layers", "k_proj", "bias"), "model.transformer.blocks.{i}.k_proj.bias", False),
    (("layers", "v_proj", "bias"), "model.transformer.blocks.{i}.v_proj.bias", False),
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
    unknown_fields: config.json keys neither family's reference config defines (logged).
    vocab_limit: ids the sampler may propose (``ModelConfig.vocab_limit``) and where it came from.
  """

  family: str
  loaded: int
  unexpected: tuple[str, ...]
  unknown_fields: tuple[str, ...] = ()
  vocab_limit: tuple[int, str] = (0, "")


@dataclasses.dataclass(frozen=True)
class _Field:
  """One ``config.json`` field of a family's reference config class.

  default: the reference's default, used when the key is absent (``configuration_llada.ModelConfig`` /
    ``configuration_dream.DreamConfig``).
  allowed: the only values this model implements (None: any value, mapped or irrelevant).
  note: what the reference does with it (the error message and the docs).
  """

  default: Any
  allowed: tuple[Any, ...] | None = None
  note: str = ""


# Every field of LLaDA's ModelConfig (GSAI-ML/LLaDA-8B-*, configuration_llada.py) and how its
# modeling_llada.py uses it. Absent keys take the reference's dataclass default.
LLADA_FIELDS: dict[str, _Field] = {
    "d_model": _Field(768), "n_heads": _Field(12), "n_layers": _Field(12),
    "n_kv_heads": _Field(None, note="None: 1 with multi_query_attention, else n_heads"),
    "multi_query_attention": _Field(None),
    "mlp_ratio": _Field(4, note="MLP width mlp_ratio * d_model when mlp_hidden_size is null"),
    "mlp_hidden_size": _Field(None),
    "activation_type": _Field("swiglu", ("silu",), "the Llama block computes act(ff_proj x) * up_proj x; "
                              "only SiLU gives SwiGLU (the reference default swiglu halves ff_proj)"),
    "block_type": _Field("sequential", ("llama",), "only LLaDALlamaBlock (q/k/v_proj, ff_proj, up_proj)"),
    "block_group_size": _Field(1, (1,), "grouped blocks are stored under other tensor names"),
    "alibi": _Field(False, (False,), "the reference asserts it off for masked diffusion"),
    "alibi_bias_max": _Field(8.0, note="ALiBi only"),
    "rope": _Field(False, (True,), "the reference asserts RoPE for masked diffusion"),
    "rope_full_precision": _Field(True, (True,), "RoPE is computed in float32 here"),
    "rope_theta": _Field(10000.0),
    "flash_attention": _Field(False, note="kernel choice only"),
    "attention_dropout": _Field(0.1, note="dropout: training only, never applied here"),
    "residual_dropout": _Field(0.1, note="dropout: training only, never applied here"),
    "embedding_dropout": _Field(0.1, note="dropout: training only, never applied here"),
    "attention_layer_norm": _Field(False, (False,), "q/k norms are not implemented"),
    "attention_layer_norm_with_affine": _Field(True, note="q/k norms only"),
    "input_emb_norm": _Field(False, (False,), "scaling embeddings by sqrt(d_model) is not implemented"),
    "layer_norm_type": _Field("default", ("rms",), "only RMSNorm (the reference default is LayerNorm)"),
    "layer_norm_with_affine": _Field(True, (True,), "norms without a learned scale are not implemented"),
    "rms_norm_eps": _Field(1e-5),
    "max_sequence_length": _Field(1024, note="context length (read by the evaluation harness)"),
    "include_qkv_bias": _Field(False),
    "include_bias": _Field(False, (False,), "biases outside q/k/v are not implemented"),
    "bias_for_layer_norm": _Field(None, (None, False), "norm biases are not implemented (null inherits "
                                  "include_bias)"),
    "scale_logits": _Field(False, (False,), "scaling logits by 1/sqrt(d_model) is not implemented"),
    "vocab_size": _Field(50257, note="the tokenizer's ids; the table has embedding_size rows"),
    "embedding_size": _Field(50304, note="null: vocab_size"),
    "weight_tying": _Field(True),
    "eos_token_id": _Field(50256), "pad_token_id": _Field(50256, note="attended: LLaDA's generate "
                                                          "passes no attention mask"),
    "mask_token_id": _Field(50256, note="required here (the reference default is GPT-2's EOS)"),
    "init_device": _Field(None), "init_fn": _Field("normal"), "init_std": _Field(0.02),
    "init_cutoff_factor": _Field(None), "precision": _Field(None), "use_cache": _Field(False),
}
# DreamConfig (Dream-org/Dream-v0-*-7B, configuration_dream.py) and modeling_dream.py.
DREAM_FIELDS: dict[str, _Field] = {
    "vocab_size": _Field(151936, note="embedding rows (the tokenizer has fewer ids)"),
    "hidden_size": _Field(4096), "intermediate_size": _Field(22016), "num_hidden_layers": _Field(32),
    "num_attention_heads": _Field(32),
    "num_key_value_heads": _Field(32, note="null: num_attention_heads"),
    "head_dim": _Field(None, note="must be hidden_size / num_attention_heads"),
    "hidden_act": _Field("silu", ("silu",), "only SiLU-gated MLPs are implemented"),
    "max_position_embeddings": _Field(32768, note="context length (read by the evaluation harness)"),
    "initializer_range": _Field(0.02), "rms_norm_eps": _Field(1e-6), "use_cache": _Field(False),
    "tie_word_embeddings": _Field(False), "rope_theta": _Field(10000.0),
    "rope_scaling": _Field(None, (None,), "only plain RoPE is implemented"),
    "use_sliding_window": _Field(False, (False,), "sliding-window attention is not implemented"),
    "sliding_window": _Field(4096, note="sliding window only"),
    "max_window_layers": _Field(28, note="sliding window only"),
    "attention_dropout": _Field(0.0, note="dropout: training only, never applied here"),
    "mask_token_id": _Field(151666),
    "pad_token_id": _Field(151643, note="left padding masked out of attention (diffusion_generate)"),
    "bos_token_id": _Field(None), "eos_token_id": _Field(None),
}
_METADATA = ("model_type", "architectures", "auto_map", "transformers_version", "torch_dtype",
             "_name_or_path")
FAMILY_FIELDS = {"llada": LLADA_FIELDS, "dream": DREAM_FIELDS}


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


def _reader(hf: Mapping[str, Any], family: str):
  """``get(name)``: the config value or the reference default, refusing values not implemented."""
  table = FAMILY_FIELDS[family]

  def get(name: str) -> Any:
    spec = table[name]
    value = hf[name] if name in hf else spec.default
    if spec.allowed is not None and value not in spec.allowed:
      where = "" if name in hf else " (absent: the reference default)"
      raise ConfigError(f"config.json:{name}", value,
                        f"{' or '.join(map(repr, spec.allowed))}{where}: {spec.note}")
    return value

  return get


def _integer(name: str, value: Any) -> int:
  if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
    raise ConfigError(f"config.json:{name}", value, "a positive integer")
  return value


def _llada_fields(get) -> dict[str, Any]:
  include_bias = get("include_bias")
  if get("bias_for_layer_norm") is None and include_bias:  # null inherits include_bias
    raise ConfigError("config.json:bias_for_layer_norm", None,
                      "false: with include_bias it inherits true, and norm biases are not implemented")
  for name in ("rope", "alibi", "activation_type", "block_type", "block_group_size", "layer_norm_type",
               "layer_norm_with_affine", "rope_full_precision", "attention_layer_norm", "input_emb_norm",
               "scale_logits"):
    get(name)  # refuses what is not implemented
  d_model, n_heads = _integer("d_model", get("d_model")), _integer("n_heads", get("n_heads"))
  n_kv, mqa = get("n_kv_heads"), get("multi_query_attention")
  if n_kv is None:
    n_kv = 1 if mqa is True else n_heads
  elif mqa is not None and n_kv != (1 if mqa else n_heads):
    raise ConfigError("config.json:n_kv_heads", n_kv, f"{1 if mqa else n_heads} with multi_query_attention={mqa} "
                      "(the reference refuses both set differently)")
  mlp = get("mlp_hidden_size")
  mlp = _integer("mlp_ratio", get("mlp_ratio")) * d_model if mlp is None else _integer("mlp_hidden_size", mlp)
  vocab = get("vocab_size")
  table = get("embedding_size")
  table = vocab if table is None else table
  return dict(vocab_size=_integer("embedding_size", table), d_model=d_model,
              n_layers=_integer("n_layers", get("n_layers")), n_heads=n_heads, n_kv_heads=_integer("n_kv_heads", n_kv),
              mlp_dim=mlp, rope_theta=float(get("rope_theta")), norm_eps=float(get("rms_norm_eps")),
              tie_embeddings=bool(get("weight_tying")), qkv_bias=bool(get("include_qkv_bias")),
              _tokenizer_ids=_integer("vocab_size", vocab))


def _dream_fields(get) -> dict[str, Any]:
  for name in ("hidden_act", "rope_scaling", "use_sliding_window"):
    get(name)
  d_model = _integer("hidden_size", get("hidden_size"))
  n_heads = _integer("num_attention_heads", get("num_attention_heads"))
  head_dim = get("head_dim")
  if head_dim is not None and head_dim * n_heads != d_model:
    raise ConfigError("config.json:head_dim", head_dim, f"hidden_size / num_attention_heads = {d_model // n_heads}")
  n_kv = get("num_key_value_heads")
  pad = get("pad_token_id")
  return dict(vocab_size=_integer("vocab_size", get("vocab_size")), d_model=d_model,
              n_layers=_integer("num_hidden_layers", get("num_hidden_layers")), n_heads=n_heads,
              n_kv_heads=n_heads if n_kv is None else _integer("num_key_value_heads", n_kv),
              mlp_dim=_integer("intermediate_size", get("intermediate_size")),
              rope_theta=float(get("rope_theta")), norm_eps=float(get("rms_norm_eps")),
              tie_embeddings=bool(get("tie_word_embeddings")), qkv_bias=True, shift_logits=True,
              mask_token_id=int(get("mask_token_id")), left_pad_id=-1 if pad is None else int(pad),
              _tokenizer_ids=0)


def config_from_hf(hf: Mapping[str, Any], **overrides: Any) -> ModelConfig:
  """Builds the :class:`ModelConfig` of a parsed HF ``config.json`` (LLaDA or Dream).

  Every field of the family's reference config class is read (:data:`LLADA_FIELDS`,
  :data:`DREAM_FIELDS`): an absent key takes the reference's default (e.g. LLaDA's MLP width
  ``mlp_ratio * d_model`` when ``mlp_hidden_size`` is null, Dream's ``num_key_value_heads`` 32), a
  value this model does not implement is refused, and keys no reference defines are logged.

  Args:
    hf: the parsed ``config.json``.
    **overrides: ModelConfig fields to set on top (e.g. ``dtype="bfloat16"``, ``remat="full"``,
      ``lora_rank=8``, ``vocab_limit=...``, or ``mask_token_id`` when a LLaDA config lacks it).
  Raises:
    ConfigError: an unknown family, or a field whose value is not implemented (the message names
      ``config.json:<field>``, the value and what is allowed): LLaDA ``input_emb_norm``,
      ``scale_logits``, ``bias_for_layer_norm`` / ``include_bias``, ``attention_layer_norm``,
      non-RMS norms, ``rope`` off, ALiBi, a block type other than ``llama``, an activation other than
      SiLU; Dream ``rope_scaling``, sliding windows, a non-SiLU MLP; or no mask token id.
  """
  family = hf_family(hf)
  get = _reader(hf, family)
  fields = (_llada_fields if family == "llada" else _dream_fields)(get)
  tokenizer_ids = fields.pop("_tokenizer_ids")
  # LLaDA's mask id only when given: the reference default (50256) is GPT-2's EOS, and LLaDA's
  # generate hard-codes 126336.
  if family == "llada" and hf.get("mask_token_id") is not None:
    fields["mask_token_id"] = int(hf["mask_token_id"])
  if tokenizer_ids and tokenizer_ids < fields["vocab_size"]:
    fields["vocab_limit"] = tokenizer_ids
  for name, spec in FAMILY_FIELDS[family].items():
    if "dropout" in name and float(hf.get(name, spec.default) or 0.0) > 0:
      log.warning("config.json:%s=%s: dropout is never applied by this library (inference and RL "
                  "updates run without it)", name, hf.get(name, spec.default))
  fields.update(overrides)
  if "mask_token_id" not in fields:
    raise ConfigError("config.json:mask_token_id", None, "a mask token id (pass mask_token_id=...)")
  return ModelConfig(**fields).validate()


def unknown_fields(hf: Mapping[str, Any]) -> tuple[str, ...]:
  """config.json keys that the family's reference config class does not define."""
  table = FAMILY_FIELDS[hf_family(hf)]
  return tuple(sorted(k for k in hf if k not in table and k not in _METADATA))


def tokenizer_size(ckpt: pathlib.Path) -> int | None:
  """1 + the largest id of the checkpoint's ``tokenizer.json`` (added tokens included), or None."""
  path = ckpt / "tokenizer.json"
  if not path.exists():
    return None
  from tokenizers import Tokenizer

  vocab = Tokenizer.from_file(str(path)).get_vocab(with_added_tokens=True)
  return 1 + max(vocab.values()) if vocab else None


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
  extra = unknown_fields(hf)
  if extra:
    log.warning("%s: config.json fields the %s reference config does not define (ignored): %s", ckpt,
                family, list(extra))
  limit_source = "config.json"
  if "vocab_limit" not in overrides:
    ids = tokenizer_size(ckpt)
    if ids is not None:
      overrides = dict(overrides, vocab_limit=ids if ids < _table_rows(hf, family) else 0)
      limit_source = "tokenizer.json"
  else:
    limit_source = "override"
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
  report = ImportReport(family, len(used), unexpected, extra, (cfg.vocab_limit, limit_source))
  return cfg, graphdef, abstract_state, report


def _table_rows(hf: Mapping[str, Any], family: str) -> int:
  """Embedding rows the config declares (LLaDA ``embedding_size`` or ``vocab_size``; Dream ``vocab_size``)."""
  get = _reader(hf, family)
  if family == "llada":
    return int(get("embedding_size") or get("vocab_size"))
  return int(get("vocab_size"))
