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
on the leading layer axis of the scanned blocks. The folder is hostile input: its files are validated and
the weights read slice by slice straight into their devices by
:mod:`daca_jax.models.checkpoint_loader` (never a ``.py`` file imported, never the whole model on the
host). Every numeric ``config.json`` value is checked (type, range, divisibility) and a bad one is a
``ConfigError`` naming ``config.json:<key>``.

A training run that starts from a checkpoint (``model.init_checkpoint``) takes the fields listed in
:data:`ARCHITECTURE_FIELDS` from the checkpoint and the :data:`RUN_FIELDS` from its own config
(:func:`run_model_config`).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import numbers
import pathlib
from typing import Any, Mapping

from flax import nnx

from daca_jax.errors import ConfigError, DataError
from daca_jax.models import checkpoint_folder, checkpoint_loader
from daca_jax.models.checkpoint_loader import NAME_MAPS  # noqa: F401  (re-exported: the tensor names)
from daca_jax.models.llada import Params
from daca_jax.types import INT_MAX, ModelConfig

log = logging.getLogger(__name__)



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


# Token ids, wherever a config names them: a JSON integer in this range (a list of them for eos).
TOKEN_ID_RANGE = (0, INT_MAX)


def short(value: Any, limit: int = 80) -> Any:
  """``value`` for an error message: itself when its repr is short, else the repr cut to ``limit``
  characters (a hostile config may hold megabytes in one field)."""
  text = repr(value) if not isinstance(value, int) or abs(value) < 10**60 else f"<an integer of {len(str(abs(value)))} digits>"
  return value if len(text) <= limit else f"{text[:limit]}..."


def _is_int(value: Any) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _is_token_id(value: Any) -> bool:
  return _is_int(value) and TOKEN_ID_RANGE[0] <= value <= TOKEN_ID_RANGE[1]


def check_metadata(hf: Mapping[str, Any]) -> None:
  """The types of ``config.json``'s metadata fields (``model_type``, ``architectures``, ...).

  Raises:
    ConfigError: naming ``config.json:<field>``, for a value of another type.
  """
  if not isinstance(hf, Mapping):
    raise ConfigError("config.json", short(hf), "a JSON object")
  rules = {"model_type": (lambda v: isinstance(v, str), "a string"),
           "architectures": (lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
                             "a list of class names (strings)"),
           "auto_map": (lambda v: isinstance(v, dict), "an object of class names"),
           "transformers_version": (lambda v: isinstance(v, str), "a string"),
           "torch_dtype": (lambda v: isinstance(v, str), "a string"),
           "_name_or_path": (lambda v: isinstance(v, str), "a string")}
  for name, (ok, allowed) in rules.items():
    if hf.get(name) is not None and not ok(hf[name]):
      raise ConfigError(f"config.json:{name}", short(hf[name]), allowed + " or null")


def check_field_types(hf: Mapping[str, Any], family: str) -> None:
  """Every field of the family's reference config that ``hf`` sets has that field's JSON type (the
  reference default's: true/false, an integer, a number, a string; a field whose default is null takes
  any scalar), sizes positive integers within int32, other numbers finite and > 0, dropouts in [0, 1] and token ids in :data:`TOKEN_ID_RANGE`; ranges
  specific to a field (positive sizes, divisibility) are checked where the field is read.

  Raises:
    ConfigError: naming ``config.json:<field>``, the value and what is allowed.
  """
  for name, spec in FAMILY_FIELDS[family].items():
    if name not in hf or hf[name] is None:
      continue
    value, default = hf[name], spec.default
    if name.endswith("token_id"):
      ok = _is_token_id(value) or (name == "eos_token_id" and isinstance(value, list) and value
                                   and all(_is_token_id(v) for v in value))
      allowed = f"a token id in [{TOKEN_ID_RANGE[0]}, {TOKEN_ID_RANGE[1]}]" + (
          " (or a list of them)" if name == "eos_token_id" else "") + " or null"
    elif "dropout" in name:
      ok, allowed = _is_number(value) and 0 <= value <= 1, "a probability in [0, 1]"
    elif isinstance(default, bool):
      ok, allowed = isinstance(value, bool), "true or false"
    elif isinstance(default, int):  # sizes and counts
      low = 0 if name in _MAY_BE_ZERO else 1
      ok = _is_int(value) and low <= value <= INT_MAX
      allowed = f"{'an integer >= 0' if low == 0 else 'a positive integer'} <= {INT_MAX}" + (
          " or null" if name in _NULLABLE else "")
    elif isinstance(default, float):  # theta, epsilons, scales
      ok, allowed = _is_number(value) and value > 0, "a finite number > 0"
    elif isinstance(default, str):
      ok, allowed = isinstance(value, str), "a string"
    else:  # null by default: a scalar (the field's own check refuses values not implemented)
      ok, allowed = isinstance(value, (bool, str)) or _is_int(value) or _is_number(value) or (
          name == "rope_scaling" and isinstance(value, dict)), "a JSON scalar or null"
    if not ok:
      raise ConfigError(f"config.json:{name}", short(value), allowed)


# Integer fields that the reference also accepts as null (another field then decides).
_NULLABLE = ("embedding_size", "num_key_value_heads")
# Integer fields of features this model does not implement, where 0 is meaningful to the reference.
_MAY_BE_ZERO = ("sliding_window", "max_window_layers")


def hf_family(hf: Mapping[str, Any]) -> str:
  """"llada" or "dream" from a parsed ``config.json``.

  Raises:
    ConfigError: neither family (the message lists what was found).
  """
  check_metadata(hf)
  kind = (hf.get("model_type") or "").lower()
  arch = [a.lower() for a in hf.get("architectures") or []]
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
  if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= INT_MAX:
    raise ConfigError(f"config.json:{name}", value, f"a positive integer <= {INT_MAX}")
  return value


def _number(name: str, value: Any) -> float:
  """A finite positive real (RoPE theta, norm epsilon)."""
  if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
    raise ConfigError(f"config.json:{name}", value, "a finite number > 0")
  return float(value)


def _token_id(name: str, value: Any, rows: int, optional: bool = False) -> int | None:
  """A token id within the embedding table's ``rows`` (None allowed when ``optional``)."""
  if value is None and optional:
    return None
  if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < rows:
    raise ConfigError(f"config.json:{name}", value, f"a token id in [0, {rows}) (the embedding rows)"
                      + (" or null" if optional else ""))
  return value


def _check_heads(d_model: int, n_heads: int, n_kv: int, keys: tuple[str, str, str]) -> None:
  """Heads that split ``d_model`` into even head widths (RoPE) and key/value heads that divide them."""
  d_key, h_key, kv_key = keys
  if d_model % n_heads or (d_model // n_heads) % 2:
    raise ConfigError(f"config.json:{h_key}", n_heads, f"a divisor of config.json:{d_key}={d_model} giving "
                      "an even head width (RoPE rotates pairs)")
  if n_heads % n_kv:
    raise ConfigError(f"config.json:{kv_key}", n_kv, f"a divisor of config.json:{h_key}={n_heads}")


def _flag(name: str, value: Any) -> bool:
  if not isinstance(value, bool):
    raise ConfigError(f"config.json:{name}", value, "true or false")
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
  n_kv = _integer("n_kv_heads", n_kv)
  _check_heads(d_model, n_heads, n_kv, ("d_model", "n_heads", "n_kv_heads"))
  mlp = get("mlp_hidden_size")
  mlp = (_integer("mlp_hidden_size", _integer("mlp_ratio", get("mlp_ratio")) * d_model) if mlp is None
         else _integer("mlp_hidden_size", mlp))
  vocab = _integer("vocab_size", get("vocab_size"))
  table = get("embedding_size")
  table = vocab if table is None else _integer("embedding_size", table)
  return dict(vocab_size=table, d_model=d_model,
              n_layers=_integer("n_layers", get("n_layers")), n_heads=n_heads, n_kv_heads=n_kv,
              mlp_dim=mlp, rope_theta=_number("rope_theta", get("rope_theta")),
              norm_eps=_number("rms_norm_eps", get("rms_norm_eps")),
              tie_embeddings=_flag("weight_tying", get("weight_tying")),
              qkv_bias=_flag("include_qkv_bias", get("include_qkv_bias")), _tokenizer_ids=vocab)


def _dream_fields(get) -> dict[str, Any]:
  for name in ("hidden_act", "rope_scaling", "use_sliding_window"):
    get(name)
  d_model = _integer("hidden_size", get("hidden_size"))
  n_heads = _integer("num_attention_heads", get("num_attention_heads"))
  n_kv = get("num_key_value_heads")
  n_kv = n_heads if n_kv is None else _integer("num_key_value_heads", n_kv)
  _check_heads(d_model, n_heads, n_kv, ("hidden_size", "num_attention_heads", "num_key_value_heads"))
  head_dim = get("head_dim")
  if head_dim is not None and head_dim != d_model // n_heads:
    raise ConfigError("config.json:head_dim", head_dim, f"hidden_size / num_attention_heads = {d_model // n_heads}")
  vocab = _integer("vocab_size", get("vocab_size"))
  pad = _token_id("pad_token_id", get("pad_token_id"), vocab, optional=True)
  return dict(vocab_size=vocab, d_model=d_model,
              n_layers=_integer("num_hidden_layers", get("num_hidden_layers")), n_heads=n_heads,
              n_kv_heads=n_kv, mlp_dim=_integer("intermediate_size", get("intermediate_size")),
              rope_theta=_number("rope_theta", get("rope_theta")),
              norm_eps=_number("rms_norm_eps", get("rms_norm_eps")),
              tie_embeddings=_flag("tie_word_embeddings", get("tie_word_embeddings")), qkv_bias=True,
              shift_logits=True, mask_token_id=_token_id("mask_token_id", get("mask_token_id"), vocab),
              left_pad_id=-1 if pad is None else pad, _tokenizer_ids=0)


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
  check_field_types(hf, family)
  get = _reader(hf, family)
  fields = (_llada_fields if family == "llada" else _dream_fields)(get)
  tokenizer_ids = fields.pop("_tokenizer_ids")
  # LLaDA's mask id only when given: the reference default (50256) is GPT-2's EOS, and LLaDA's
  # generate hard-codes 126336.
  if family == "llada" and hf.get("mask_token_id") is not None:
    fields["mask_token_id"] = _token_id("mask_token_id", hf["mask_token_id"], fields["vocab_size"])
  if tokenizer_ids and tokenizer_ids < fields["vocab_size"]:
    fields["vocab_limit"] = tokenizer_ids
  for name, spec in FAMILY_FIELDS[family].items():
    if "dropout" in name and (hf.get(name, spec.default) or 0.0) > 0:
      log.warning("config.json:%s=%s: dropout is never applied by this library (inference and RL "
                  "updates run without it)", name, hf.get(name, spec.default))
  fields.update(overrides)
  if "mask_token_id" not in fields:
    raise ConfigError("config.json:mask_token_id", None, "a mask token id (pass mask_token_id=...)")
  return ModelConfig(**fields).validate().validate_architecture()


def unknown_fields(hf: Mapping[str, Any]) -> tuple[str, ...]:
  """config.json keys that the family's reference config class does not define."""
  table = FAMILY_FIELDS[hf_family(hf)]
  return tuple(sorted(k for k in hf if k not in table and k not in _METADATA))


def tokenizer_size(ckpt: pathlib.Path) -> int | None:
  """1 + the largest id the checkpoint's tokenizer knows (added tokens included), or None without one.

  Read from ``tokenizer.json`` (LLaDA), else from the slow tokenizer's files that Dream releases
  instead: ``vocab.json``, ``added_tokens.json`` and ``tokenizer_config.json``'s ``added_tokens_decoder``;
  all through :mod:`daca_jax.models.checkpoint_folder`.

  Raises:
    DataError: a ``tokenizer.json`` that the ``tokenizers`` library cannot parse, a ``vocab.json`` /
      ``added_tokens.json`` / ``tokenizer_config.json`` that is not the JSON mapping it should be, an
      id outside ``[0, MAX_TOKEN_ID)``, or a file that is not a regular file inside the folder.
  """
  folder = checkpoint_folder.root(ckpt)
  if not checkpoint_folder.has(folder, "tokenizer.json"):
    return _slow_tokenizer_size(folder)
  vocab = checkpoint_folder.read_tokenizer(folder).get_vocab(with_added_tokens=True)
  return 1 + max(vocab.values()) if vocab else None


def _slow_tokenizer_size(folder: pathlib.Path) -> int | None:
  """:func:`tokenizer_size` of a folder with ``vocab.json`` (+ added tokens) and no ``tokenizer.json``."""
  if not checkpoint_folder.has(folder, "vocab.json"):
    return None
  top = 0
  for name, key in (("vocab.json", None), ("added_tokens.json", None), ("tokenizer_config.json", "added_tokens_decoder")):
    if not checkpoint_folder.has(folder, name):
      continue
    limit = checkpoint_folder.MAX_TOKENIZER_BYTES if name == "vocab.json" else checkpoint_folder.MAX_JSON_BYTES
    data = checkpoint_folder.read_json(folder, name, max_bytes=limit)
    table = data if key is None else data.get(key) or {}
    if not isinstance(table, dict):
      raise DataError(f"{folder / name}:{key}: a JSON {type(table).__name__}, expected an object of ids")
    where = f"{folder / name}" + (f":{key}" if key else "")
    ids = [int(i) if isinstance(i, str) and i.isdigit() and len(i) < 12 else i for i in table] if key else table.values()
    top = max(top, checkpoint_folder.check_token_ids(ids, where))
  return top or None


def checkpoint_config(files: checkpoint_loader.CheckpointFiles, **overrides: Any
                      ) -> tuple[ModelConfig, str, tuple[int, str]]:
  """The :class:`ModelConfig` of a validated checkpoint folder: ``config.json`` (:func:`config_from_hf`)
  with ``vocab_limit`` from ``tokenizer.json`` when its ids stop short of the embedding table.

  Returns:
    ``(cfg, family, (vocab_limit, where it came from))``.
  Raises:
    ConfigError: see :func:`config_from_hf`.
  """
  hf = files.hf
  family = hf_family(hf)
  check_field_types(hf, family)
  extra = unknown_fields(hf)
  if extra:
    log.warning("%s: config.json fields the %s reference config does not define (ignored): %s", files.path,
                family, list(extra))
  limit_source = "config.json"
  if "vocab_limit" not in overrides:
    ids = tokenizer_size(files.path)
    if ids is not None:
      overrides = dict(overrides, vocab_limit=ids if ids < _table_rows(hf, family) else 0)
      limit_source = "tokenizer.json"
  else:
    limit_source = "override"
  cfg = config_from_hf(hf, **overrides)
  return cfg, family, (cfg.vocab_limit, limit_source)


def load_hf_checkpoint(path: str | pathlib.Path, **overrides: Any
                       ) -> tuple[ModelConfig, nnx.GraphDef, Params, ImportReport]:
  """Reads a local LLaDA or Dream checkpoint directory into ``(cfg, graphdef, params, report)``.

  ``params`` is an ``nnx.State`` like :func:`daca_jax.models.init_model`'s, in ``cfg.param_dtype``
  (float32 unless overridden, e.g. ``param_dtype="bfloat16"`` for an 8B model on one device), on the
  first local device, ready for :func:`daca_jax.models.make_logits_fn(graphdef)`. The weights are read
  slice by slice (:func:`daca_jax.models.checkpoint_loader.load_params`).

  Args:
    path: the checkpoint directory.
    **overrides: ModelConfig fields set on top of ``config.json`` (see :func:`config_from_hf`).
  Raises:
    DataError: a missing or malformed file, a tensor the model needs that the checkpoint lacks, or a
      tensor whose shape or dtype differs (the message names the tensor, the expected and the found
      shape), a non-finite weight.
    ConfigError: an unsupported or malformed config (see :func:`config_from_hf`).
  """
  files = checkpoint_loader.open_checkpoint(path)
  cfg, family, limit = checkpoint_config(files, **overrides)
  graphdef, params = checkpoint_loader.load_params(files, cfg, family)
  unexpected = checkpoint_loader.unused_tensors(files, cfg, family)
  if unexpected:
    log.warning("%s: %d checkpoint tensors unused by the model: %s", files.path, len(unexpected),
                list(unexpected[:10]))
  used = len(files.tensors) - len(unexpected)
  return cfg, graphdef, params, ImportReport(family, used, unexpected, unknown_fields(files.hf), limit)


def _table_rows(hf: Mapping[str, Any], family: str) -> int:
  """Embedding rows the config declares (LLaDA ``embedding_size`` or ``vocab_size``; Dream ``vocab_size``)."""
  get = _reader(hf, family)
  if family == "llada" and get("embedding_size") is not None:
    return _integer("embedding_size", get("embedding_size"))
  return _integer("vocab_size", get("vocab_size"))


# --- a training run's model: architecture from the checkpoint, the rest from the run -------------------

# ModelConfig fields a checkpoint determines (``model.init_checkpoint``): the run's own value must be
# left at its default or equal the checkpoint's.
ARCHITECTURE_FIELDS = ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "mlp_dim", "rope_theta",
                       "norm_eps", "tie_embeddings", "mask_token_id", "qkv_bias", "shift_logits",
                       "vocab_limit", "left_pad_id")
# ModelConfig fields that stay the run's choice: how the weights are held and computed, and the adapters.
RUN_FIELDS = ("dtype", "param_dtype", "remat", "lora_rank", "lora_alpha", "lora_targets", "lora_dropout",
              "logprob_chunk", "unroll_layers", "init_checkpoint", "require_checkpoint")
# Where each architecture field comes from, per family (the error message names it).
SOURCE_KEYS = {
    "llada": {"vocab_size": "config.json:embedding_size", "d_model": "config.json:d_model",
              "n_layers": "config.json:n_layers", "n_heads": "config.json:n_heads",
              "n_kv_heads": "config.json:n_kv_heads", "mlp_dim": "config.json:mlp_hidden_size",
              "rope_theta": "config.json:rope_theta", "norm_eps": "config.json:rms_norm_eps",
              "tie_embeddings": "config.json:weight_tying", "mask_token_id": "config.json:mask_token_id",
              "qkv_bias": "config.json:include_qkv_bias",
              "shift_logits": "config.json:model_type (LLaDA reads position i's logits at i)",
              "vocab_limit": "tokenizer.json (its largest id + 1)",
              "left_pad_id": "config.json:model_type (LLaDA attends to its pads)"},
    "dream": {"vocab_size": "config.json:vocab_size", "d_model": "config.json:hidden_size",
              "n_layers": "config.json:num_hidden_layers", "n_heads": "config.json:num_attention_heads",
              "n_kv_heads": "config.json:num_key_value_heads", "mlp_dim": "config.json:intermediate_size",
              "rope_theta": "config.json:rope_theta", "norm_eps": "config.json:rms_norm_eps",
              "tie_embeddings": "config.json:tie_word_embeddings", "mask_token_id": "config.json:mask_token_id",
              "qkv_bias": "config.json:model_type (Dream's Qwen2 blocks have q/k/v biases)",
              "shift_logits": "config.json:model_type (Dream predicts token i at position i - 1)",
              "vocab_limit": "tokenizer.json (its largest id + 1)",
              "left_pad_id": "config.json:pad_token_id"},
}


def run_model_config(files: checkpoint_loader.CheckpointFiles, run: ModelConfig) -> ModelConfig:
  """The model a run that starts from checkpoint ``files`` trains: :data:`ARCHITECTURE_FIELDS` from the
  checkpoint, :data:`RUN_FIELDS` from ``run``.

  An architecture field of ``run`` still at :class:`ModelConfig`'s default (the tiny model's, which
  ``configs/base.py`` repeats) counts as unset; a value set to anything else must equal the
  checkpoint's. (So a field set explicitly to the tiny default, e.g. ``model.d_model=128``, is not
  noticed: it is indistinguishable from an unset one, and the checkpoint's value is used.)

  Args:
    files: from :func:`daca_jax.models.checkpoint_loader.open_checkpoint`.
    run: the run's ``model`` section.
  Raises:
    ConfigError: naming ``model.<field>``, its value, the checkpoint's and where the checkpoint says
      it (``config.json:<key>``), for a contradiction; or a bad ``config.json`` value (see
      :func:`config_from_hf`).
  """
  family = hf_family(files.hf)
  cfg, _, _ = checkpoint_config(files, **{f: getattr(run, f) for f in RUN_FIELDS})
  default = ModelConfig()
  for f in ARCHITECTURE_FIELDS:
    mine, theirs = getattr(run, f), getattr(cfg, f)
    if mine != getattr(default, f) and mine != theirs:
      raise ConfigError(f"model.{f}", mine, f"{theirs!r}, which {SOURCE_KEYS[family][f]} of "
                        f"model.init_checkpoint={files.path} sets (the checkpoint fixes the architecture: "
                        f"leave model.{f} unset)")
  return cfg
