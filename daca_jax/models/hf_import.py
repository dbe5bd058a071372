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

The ``config.json`` field tables are in :mod:`daca_jax.models.hf_fields`, their validation and the
:class:`ModelConfig` they give in :mod:`daca_jax.models.hf_config`, the tensors in
:mod:`daca_jax.models.checkpoint_loader`; this module puts them together and re-exports their public names.
"""
from __future__ import annotations

import dataclasses
import logging
import pathlib
from typing import Any

from flax import nnx

from daca_jax.errors import ConfigError, DataError
from daca_jax.models import checkpoint_folder, checkpoint_loader
from daca_jax.models.checkpoint_loader import NAME_MAPS
from daca_jax.models.hf_config import (TOKEN_ID_RANGE, check_field_types, check_metadata, config_from_hf, hf_family,
                                       short, table_rows, unknown_fields)
from daca_jax.models.hf_fields import DREAM_FIELDS, FAMILY_FIELDS, LLADA_FIELDS
from daca_jax.models.llada import Params
from daca_jax.config.model import ModelConfig

__all__ = ["ARCHITECTURE_FIELDS", "DREAM_FIELDS", "FAMILY_FIELDS", "LLADA_FIELDS", "NAME_MAPS", "RUN_FIELDS",
           "SOURCE_KEYS", "TOKEN_ID_RANGE", "ImportReport", "check_field_types", "check_metadata",
           "checkpoint_config", "config_from_hf", "hf_family", "load_hf_checkpoint", "run_model_config", "short",
           "tokenizer_size", "unknown_fields"]

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
  vocab_limit: tuple[int, str] = (0, "")


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
      overrides = dict(overrides, vocab_limit=ids if ids < table_rows(hf, family) else 0)
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
