"""``config.json`` of a Hugging Face LLaDA or Dream checkpoint -> :class:`~daca_jax.config.model.ModelConfig`.

The folder is hostile input: every field of the family's reference config (:mod:`daca_jax.models.hf_fields`)
that ``config.json`` sets is type- and range-checked, a value this model does not implement is refused,
and each error is a ``ConfigError`` naming ``config.json:<key>``. :mod:`daca_jax.models.hf_import`
re-exports the public names.
"""
from __future__ import annotations

import logging
import math
import numbers
from typing import Any, Mapping

from daca_jax.errors import ConfigError
from daca_jax.models.hf_fields import FAMILY_FIELDS, METADATA_FIELDS
from daca_jax.config.checks import INT_MAX
from daca_jax.config.model import ModelConfig

log = logging.getLogger("daca_jax.models.hf_import")  # the name the import's warnings always had


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

  Every field of the family's reference config class is read (:data:`~daca_jax.models.hf_fields.LLADA_FIELDS`,
  :data:`~daca_jax.models.hf_fields.DREAM_FIELDS`): an absent key takes the reference's default (e.g. LLaDA's MLP width
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
  return tuple(sorted(k for k in hf if k not in table and k not in METADATA_FIELDS))


def table_rows(hf: Mapping[str, Any], family: str) -> int:
  """Embedding rows the config declares (LLaDA ``embedding_size`` or ``vocab_size``; Dream ``vocab_size``)."""
  get = _reader(hf, family)
  if family == "llada" and get("embedding_size") is not None:
    return _integer("embedding_size", get("embedding_size"))
  return _integer("vocab_size", get("vocab_size"))
