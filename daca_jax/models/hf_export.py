"""Write a trained policy back in the layout of the Hugging Face LLaDA / Dream checkpoint it started from.

The inverse of :mod:`daca_jax.models.hf_import`, for two products:

* :func:`write_merged`: the whole model as the source folder holds it. Every tensor of the source
  comes back under its own name, shape and dtype (a bf16 checkpoint exports bf16), in the same shard
  files listed in the same ``model.safetensors.index.json`` (``metadata.total_size`` recomputed as
  transformers does: the sum of the tensors' byte sizes), or resharded with huggingface_hub's
  splitter (``max_shard_size``, transformers' ``save_pretrained`` rule). A tensor the model does not
  use (e.g. a stored rotary buffer) is copied through unchanged. Every other top-level file
  (``config.json``, ``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json``,
  ``special_tokens_map.json``, the remote-code ``*.py``, licence, ...) is copied as bytes, never
  parsed beyond ``config.json``'s family and never imported; weights in other formats (``*.bin``,
  ``*.pth``, ...) are left out, as they would hold the untrained model. ``config.json`` needs no
  change: the architecture, dtype and vocabulary are those of the source.
  LoRA adapters are folded in float32: ``W' = W + (alpha / r) A B`` from the stored base and
  adapters, then cast to the source dtype once (a bf16 merge would round the update away).
* :func:`write_adapter`: a PEFT LoRA adapter (``adapter_config.json`` + ``adapter_model.safetensors``)
  that ``peft.PeftModel.from_pretrained`` puts onto the source model, under the family's module names
  (LLaDA: ``model.transformer.blocks.N.{q_proj, k_proj, v_proj, attn_out, ff_proj, up_proj, ff_out}``;
  Dream, as Qwen2: ``model.layers.N.self_attn.{q,k,v,o}_proj``, ``model.layers.N.mlp.{gate,up,down}_proj``).

Both read the source folder lazily, one tensor at a time, and write one shard at a time: the host
holds the trained parameters once plus one shard.

Why one module over 350 lines: both products read the source folder through the same lazy reader and
tensor-name mapping; together they are one job, the inverse of the import.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import pathlib
import shutil
import stat
from typing import Any, Mapping

import jax.numpy as jnp
import numpy as np

from daca_jax.errors import DataError
from daca_jax.models import checkpoint_folder
from daca_jax.models.hf_import import NAME_MAPS, hf_family
from daca_jax.models.llada import LORA_MODULES

log = logging.getLogger(__name__)

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
# Weights in any format: never copied (they would be the untrained model next to the trained one).
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx",
                    ".npz")
_WEIGHT_INDEXES = (INDEX_FILE, "pytorch_model.bin.index.json", "tf_model.h5.index.json",
                   "flax_model.msgpack.index.json")
# transformers refuses a safetensors file whose header metadata has no known "format".
_SHARD_METADATA = {"format": "pt"}
# Source dtypes a trained parameter may be cast to.
_FLOAT_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": jnp.bfloat16}
# PEFT's prefix of a LoRA tensor: PeftModel.base_model (the LoraModel) .model (the transformers model).
PEFT_PREFIX = "base_model.model."
_REDOWNLOAD = "download the checkpoint again"


@dataclasses.dataclass(frozen=True)
class ExportReport:
  """What :func:`write_merged` / :func:`write_adapter` wrote.

  Attributes:
    family: "llada" or "dream".
    tensors: number of tensors written.
    total_size: their bytes (``metadata.total_size`` of the index).
    shards: the safetensors files written.
    copied: the other files copied from the source.
    passed_through: source tensors no parameter maps to, copied unchanged.
    skipped: entries of the source not copied because they are not regular files inside it (symlinks
      out of the folder, FIFOs, devices), each as ``"<name> (<why>)"``.
  """

  family: str
  tensors: int
  total_size: int
  shards: tuple[str, ...]
  copied: tuple[str, ...] = ()
  passed_through: tuple[str, ...] = ()
  skipped: tuple[str, ...] = ()


class _Source:
  """A checkpoint folder's tensors: name -> (file, safetensors dtype, shape), read one at a time."""

  def __init__(self, folder: pathlib.Path):
    from safetensors import safe_open

    self.folder = folder = checkpoint_folder.root(folder)
    checkpoint_folder.require(folder, "config.json", "the model's config")
    self.hf = checkpoint_folder.read_json(folder, "config.json")
    self.family = hf_family(self.hf)
    index = folder / INDEX_FILE
    if checkpoint_folder.has(folder, INDEX_FILE):
      parsed = checkpoint_folder.read_json(folder, INDEX_FILE)
      weight_map = parsed.get("weight_map")
      if not isinstance(weight_map, dict) or not weight_map:
        raise DataError(f"{index}: no 'weight_map' of tensor names to shard files")
      metadata = parsed.get("metadata")
      self.index_metadata = dict(metadata) if isinstance(metadata, dict) else {}
      by_file: dict[str, list[str]] = {}
      for name, file in weight_map.items():
        checkpoint_folder.check_name(folder, file, f"{index}: tensor {name!r:.100} maps to a file that")
        by_file.setdefault(file, []).append(name)
    elif checkpoint_folder.has(folder, SINGLE_FILE):
      self.index_metadata = None
      by_file = {SINGLE_FILE: []}
    else:
      raise DataError(f"{folder}: neither {INDEX_FILE} nor {SINGLE_FILE} found")
    self.files: dict[str, str] = {}  # tensor -> shard file name, in the source's shard order
    self.info: dict[str, tuple[str, tuple[int, ...]]] = {}
    self._handles: dict[str, Any] = {}
    for file in sorted(by_file):
      path = checkpoint_folder.member(folder, file, where=str(index))
      if path is None:
        raise DataError(f"{folder}: shard {file} listed in {INDEX_FILE} does not exist")
      try:
        handle = self._handles[file] = safe_open(str(path), framework="numpy")
      except Exception as e:  # safetensors' SafetensorError: a malformed header, a truncated file
        raise DataError(f"{path}: not a readable safetensors file ({e}); {_REDOWNLOAD}") from None
      stored = set(handle.keys())
      for name in by_file[file] or sorted(stored):
        if name not in stored:
          raise DataError(f"{path}: tensor {name!r} listed in {INDEX_FILE} is not in the file")
        s = handle.get_slice(name)
        self.files[name] = file
        self.info[name] = (s.get_dtype(), tuple(s.get_shape()))

  def read(self, name: str) -> np.ndarray:
    """The tensor as stored (numpy; bf16 as ``jnp.bfloat16``, ml_dtypes' type)."""
    return self._handles[self.files[name]].get_tensor(name)

  @functools.cached_property
  def n_layers(self) -> int:
    """Blocks in the checkpoint: consecutive layer indices holding the family's first layer tensor."""
    template = next(t for key, t, _ in NAME_MAPS[self.family] if key[0] == "layers")
    n = 0
    while template.format(i=n) in self.info:
      n += 1
    return n

  def nbytes(self, name: str) -> int:
    dtype, shape = self.info[name]
    return int(np.prod(shape, dtype=np.int64)) * _itemsize(dtype)


def _itemsize(dtype: str) -> int:
  sizes = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2,
           "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}
  if dtype not in sizes:
    raise DataError(f"tensor dtype {dtype!r} is not one safetensors defines")
  return sizes[dtype]


def _param_names(family: str, n_layers: int) -> dict[str, tuple[tuple[str, ...], int | None, bool]]:
  """HF tensor name -> (path in the pure param dict, layer index or None, transposed)."""
  out = {}
  for key, template, transpose in NAME_MAPS[family]:
    if key[0] == "layers":
      out.update({template.format(i=i): (key, i, transpose) for i in range(n_layers)})
    else:
      out[template] = (key, None, transpose)
  return out


def _lookup(tree: Mapping[str, Any], key: tuple[str, ...]) -> Any:
  node: Any = tree
  for k in key:
    if not isinstance(node, Mapping) or k not in node:
      return None
    node = node[k]
  return node


def _leaf_paths(tree: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
  out = []
  for k, v in tree.items():
    out.extend(_leaf_paths(v, prefix + (k,)) if isinstance(v, Mapping) else [prefix + (k,)])
  return out


_TARGET_OF = {("layers", module, "kernel"): target for target, module in LORA_MODULES.items()}


def copy_side_files(source: str | pathlib.Path, dest: pathlib.Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
  """Copies every top-level non-weight file of ``source`` into ``dest`` as bytes.

  Only regular files inside the folder are copied (a symlink whose target lies inside it is copied as
  the target's bytes): the export is a folder users publish, so a symlink out of the source (to a
  token file, ``/proc/self/environ``) must never bring its target's bytes into it. Such links,
  FIFOs, devices and sockets are skipped and named in a warning; hidden entries, sub-folders and weights
  in any format are left out.

  Returns:
    ``(names copied, "<name> (<why>)" of each entry skipped for being outside the folder or special)``.
  """
  folder = checkpoint_folder.root(source)
  copied, refused, subfolders = [], [], []
  for entry in checkpoint_folder.entries(folder):
    name = entry.name
    if entry.kind in ("outside", "special"):
      refused.append(f"{name} ({entry.why})")
    elif entry.kind == "dir":
      subfolders.append(name)
    elif entry.kind == "file" and not name.endswith(_WEIGHT_SUFFIXES) and name not in _WEIGHT_INDEXES:
      _copy_regular(entry.path, dest / name)
      copied.append(name)
  if subfolders:
    log.warning("%s: sub-folders not exported: %s", folder, subfolders)
  if refused:
    log.warning("%s: not exported (not a regular file inside the source folder): %s", folder, refused)
  return tuple(copied), tuple(refused)


def _copy_regular(path: pathlib.Path, dest: pathlib.Path) -> None:
  """Copies ``path`` (checked regular, resolved) without following a link swapped in since the check."""
  fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
  with os.fdopen(fd, "rb") as f:
    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
      raise DataError(f"{path}: no longer a regular file")
    with open(dest, "wb") as out:
      shutil.copyfileobj(f, out)


def _shard_plan(src: _Source, max_shard_size: int | str | None) -> tuple[dict[str, list[str]], bool]:
  """``({file: tensor names}, sharded)``: the source's own files, or huggingface_hub's split."""
  if max_shard_size is None:
    plan: dict[str, list[str]] = {}
    for name, file in src.files.items():
      plan.setdefault(file, []).append(name)
    return plan, src.index_metadata is not None
  from huggingface_hub import split_state_dict_into_shards_factory

  split = split_state_dict_into_shards_factory(
      {name: src.nbytes(name) for name in src.files}, get_storage_size=lambda n: n,
      filename_pattern="model{suffix}.safetensors", max_shard_size=max_shard_size)
  return dict(split.filename_to_tensors), split.is_sharded


def write_merged(source: str | pathlib.Path, dest: str | pathlib.Path, base: Mapping[str, Any] | None,
                 adapters: Mapping[str, Any] | None = None, *, lora_scale: float = 0.0,
                 max_shard_size: int | str | None = None) -> ExportReport:
  """Writes the policy ``base`` (+ ``adapters`` merged) into empty folder ``dest`` in ``source``'s layout.

  Args:
    source: the Hugging Face checkpoint folder the policy was loaded from.
    dest: an existing empty folder.
    base: the model's parameters, a pure dict as ``nnx.to_pure_dict`` gives (``[in, out]`` kernels,
      layers stacked on a leading axis; numpy or jax arrays, any float dtype). None for a LoRA policy
      whose base is the source itself (its tensors are then read from ``source``).
    adapters: LoRA adapters ``{target: {"a": [N, in, r], "b": [N, r, out]}}`` or None.
    lora_scale: ``lora_alpha / lora_rank``.
    max_shard_size: None keeps the source's shard files; an int (bytes) or a string such as "5GB"
      reshards with transformers' rule (huggingface_hub ``split_state_dict_into_shards_factory``).
  Returns:
    An :class:`ExportReport`.
  Raises:
    DataError: a source tensor whose shape differs from the trained parameter's (the message names
      the tensor and both shapes), a trained parameter or adapter that no source tensor holds, a
      parameter stored in a non-float dtype, or a source folder without config.json / weights.
    ConfigError: a ``config.json`` of neither family.
  """
  src, dest = _Source(pathlib.Path(source)), pathlib.Path(dest)
  if base is None and adapters is None:
    raise ValueError("write_merged needs the trained base parameters, the adapters, or both")
  n_layers = src.n_layers
  mapped = {n: spec for n, spec in _param_names(src.family, n_layers).items() if n in src.info}
  _check_shapes(src, mapped, base, adapters)

  def tensor(name: str) -> np.ndarray:
    if name not in mapped:
      return src.read(name)
    key, i, transpose = mapped[name]
    dtype = _FLOAT_DTYPES[src.info[name][0]]
    if base is not None:
      w = np.asarray(_lookup(base, key))
      w = w[i] if i is not None else w
      w = w.T if transpose else w  # torch layout [out, in]
    else:
      w = src.read(name)
    target = _TARGET_OF.get(key)
    if adapters is not None and target in adapters:
      a = np.asarray(adapters[target]["a"][i], np.float32)  # [in, r]
      b = np.asarray(adapters[target]["b"][i], np.float32)  # [r, out]
      w = w.astype(np.float32) + np.float32(lora_scale) * (a @ b).T
    return np.ascontiguousarray(w.astype(dtype))

  from safetensors.numpy import save_file

  plan, sharded = _shard_plan(src, max_shard_size)
  weight_map, total = {}, 0
  for file, names in plan.items():
    tensors = {name: tensor(name) for name in names}
    save_file(tensors, str(dest / file), metadata=_SHARD_METADATA)
    total += sum(t.nbytes for t in tensors.values())
    weight_map.update({name: file for name in names})
    del tensors
  if sharded:
    metadata = dict(src.index_metadata or {}, total_size=total)
    (dest / INDEX_FILE).write_text(json.dumps({"metadata": metadata, "weight_map": weight_map}, indent=2,
                                              sort_keys=True) + "\n")
  passed = tuple(sorted(set(src.info) - set(mapped)))
  if passed:
    log.warning("%s: %d tensors no parameter uses, copied unchanged: %s", source, len(passed), list(passed[:10]))
  copied, skipped = copy_side_files(src.folder, dest)
  return ExportReport(src.family, len(weight_map), total, tuple(plan), copied, passed, skipped)


def _check_shapes(src: _Source, mapped: Mapping[str, tuple[tuple[str, ...], int | None, bool]],
                  base: Mapping[str, Any] | None, adapters: Mapping[str, Any] | None) -> None:
  """Every trained array has a source tensor of its (torch-layout) shape, before anything is written."""
  used: set[tuple[str, ...]] = set()
  for name, (key, i, transpose) in mapped.items():
    dtype, shape = src.info[name]
    if dtype not in _FLOAT_DTYPES:
      raise DataError(f"{src.folder}: tensor {name!r} is stored as {dtype}, expected one of "
                      f"{sorted(_FLOAT_DTYPES)} for a model parameter")
    if base is not None:
      value = _lookup(base, key)
      if value is None:
        raise DataError(f"{src.folder}: tensor {name!r} has no trained parameter {'/'.join(key)}")
      if i is not None and np.shape(value)[0] != src.n_layers:
        raise DataError(f"trained parameter {'/'.join(key)} has {np.shape(value)[0]} layers, the source "
                        f"checkpoint {src.folder} {src.n_layers}: not the checkpoint the run started from")
      want = tuple(np.shape(value))[1:] if i is not None else tuple(np.shape(value))
      want = want[::-1] if transpose else want
      if want != shape:
        raise DataError(f"{src.folder}: tensor {name!r} has shape {shape}, the trained parameter "
                        f"{'/'.join(key)} {want}: not the checkpoint the run started from")
    used.add(key)
  if base is not None:
    left = [p for p in _leaf_paths(base) if p not in used]
    if left:
      raise DataError(f"{src.folder}: no tensor of the source holds trained parameters "
                      f"{['/'.join(p) for p in left]}")
  for target in adapters or {}:
    key = ("layers", LORA_MODULES.get(target, target), "kernel")
    if key not in used:
      raise DataError(f"{src.folder}: LoRA target {target!r} has no projection in the source checkpoint")


def write_adapter(source: str | pathlib.Path, dest: str | pathlib.Path, adapters: Mapping[str, Any], *,
                  rank: int, alpha: float, dropout: float = 0.0,
                  base_model_name_or_path: str | None = None) -> ExportReport:
  """Writes ``adapters`` as a PEFT LoRA adapter for the model in ``source`` into empty folder ``dest``.

  ``adapter_model.safetensors`` holds, for every layer N and target, ``base_model.model.<module>.lora_A
  .weight`` ``[r, in]`` (= ``a[N].T``) and ``...lora_B.weight`` ``[out, r]`` (= ``b[N].T``) in the
  adapters' own dtype, ``<module>`` being the source's module path (its tensor name without
  ``.weight``). PEFT computes ``W x + (lora_alpha / r) B A x``, which is this library's
  ``x W + (alpha / r) (x A) B``. ``adapter_config.json``: ``peft_type`` LORA, ``task_type`` CAUSAL_LM
  (as d1 trains LLaDA with PEFT), ``r``, ``lora_alpha``, ``lora_dropout``, ``target_modules`` (the
  modules' last names) and ``exclude_modules`` (any other module of the source with one of those names:
  LLaDA's output head ``model.transformer.ff_out`` shares its name with the MLP's ``ff_out``).

  Args:
    source: the checkpoint folder the adapters were trained on.
    dest: an existing empty folder.
    adapters: ``{target: {"a": [N, in, r], "b": [N, r, out]}}``.
    rank, alpha, dropout: the run's LoRA settings (``dropout`` is recorded for PEFT training only).
    base_model_name_or_path: written to the config (default: the source's absolute path).
  Raises:
    DataError: an adapter whose shapes do not fit the source's projection (named), or an unknown target.
  """
  from safetensors.numpy import save_file

  src, dest = _Source(pathlib.Path(source)), pathlib.Path(dest)
  n_layers = src.n_layers
  templates = {key: template for key, template, _ in NAME_MAPS[src.family]}
  tensors, modules = {}, set()
  for target, ab in adapters.items():
    key = ("layers", LORA_MODULES.get(target, ""), "kernel")
    if key not in templates:
      raise DataError(f"LoRA target {target!r}: not one of {sorted(LORA_MODULES)}")
    a, b = np.asarray(ab["a"]), np.asarray(ab["b"])
    if a.shape[0] != n_layers or b.shape[0] != n_layers or a.shape[2] != rank or b.shape[1] != rank:
      raise DataError(f"LoRA target {target!r}: adapters a {a.shape}, b {b.shape}, expected "
                      f"[{n_layers}, in, {rank}] and [{n_layers}, {rank}, out]")
    for i in range(n_layers):
      weight = templates[key].format(i=i)
      shape = src.info.get(weight, (None, None))[1]
      if shape != (b.shape[2], a.shape[1]):
        raise DataError(f"{src.folder}: tensor {weight!r} has shape {shape}, LoRA target {target!r} "
                        f"needs ({b.shape[2]}, {a.shape[1]}) = [out, in]")
      module = weight[:-len(".weight")]
      tensors[f"{PEFT_PREFIX}{module}.lora_A.weight"] = np.ascontiguousarray(a[i].T)
      tensors[f"{PEFT_PREFIX}{module}.lora_B.weight"] = np.ascontiguousarray(b[i].T)
      modules.add(module)
  names = sorted({m.rsplit(".", 1)[-1] for m in modules})
  others = sorted({n[:-len(".weight")] for n in src.info if n.endswith(".weight")} - modules)
  exclude = [m for m in others if m.rsplit(".", 1)[-1] in names]
  config = {
      "peft_type": "LORA", "task_type": "CAUSAL_LM",
      "base_model_name_or_path": base_model_name_or_path or str(pathlib.Path(source).absolute()),
      "r": int(rank), "lora_alpha": int(alpha) if float(alpha).is_integer() else float(alpha),
      "lora_dropout": float(dropout), "target_modules": names, "exclude_modules": exclude or None,
      "bias": "none", "fan_in_fan_out": False, "use_rslora": False, "use_dora": False,
      "init_lora_weights": True, "inference_mode": True, "modules_to_save": None,
      "layers_to_transform": None, "layers_pattern": None, "rank_pattern": {}, "alpha_pattern": {},
  }
  save_file(tensors, str(dest / ADAPTER_WEIGHTS), metadata=_SHARD_METADATA)
  (dest / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
  return ExportReport(src.family, len(tensors), sum(t.nbytes for t in tensors.values()), (ADAPTER_WEIGHTS,))
