"""Reads a LLaDA / Dream Hugging Face checkpoint folder's weights straight into their device shardings.

A checkpoint folder comes from the internet and is treated as hostile input:

* its ``.py`` files (``modeling_*.py``, ``configuration_*.py``) are never imported or executed; only
  ``config.json``, ``model.safetensors[.index.json]`` and the shards are read, as data;
* :func:`open_checkpoint` validates ``config.json`` (a JSON object of bounded size, no NaN, no
  duplicate keys), the index (a ``weight_map`` of tensor names to plain file names inside the folder:
  no ``../``, no absolute paths) and every shard's header (:func:`daca_jax.models.safetensors_file.read_header`)
  before anything else;
* :func:`check_tensors` compares every tensor the model needs, for every layer, with the shape and
  dtype implied by the :class:`~daca_jax.config.model.ModelConfig` (float tensors only: F16 / BF16 / F32 / F64)
  and names the ``config.json`` keys behind a mismatch, so an absurd size (``n_layers`` 10**9, a
  vocabulary of 2**40) fails on arithmetic, before any array exists;
* values are checked finite as they are read (one pass over each slice on the host; the cost is a
  fraction of the read itself): a NaN/inf weight is a ``DataError`` naming the tensor.

Loading (:func:`load_params`) never holds the model on the host: every parameter is built with
``jax.make_array_from_callback`` over its target sharding, and the callback reads, for one device's
index, only that slice of each layer's tensor from disk (rows by ``pread``, columns in memory), casts
it to ``param_dtype`` and transposes torch's ``[out, in]`` to the kernels' ``[in, out]``. The host
therefore holds at most one parameter's addressable shards at a time (under FSDP over n local devices,
one layer stack of one parameter; on a multi-host mesh each process reads only its own devices'
slices), and with a bf16 checkpoint and ``param_dtype="bfloat16"`` no float32 copy ever exists.

Why one module over 350 lines: validating the folder, checking its tensors against the config and reading
them slice by slice all work on one parsed view of the folder (:class:`CheckpointFiles`), and each check
guards the read that follows it.
"""
from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import re
from typing import Any, Callable

import jax
import numpy as np
from flax import nnx

from daca_jax.errors import DataError
from daca_jax.models import checkpoint_folder
from daca_jax.models.llada import Params, Transformer
from daca_jax.models.safetensors_file import (FLOAT_CODES, MAX_HEADER_BYTES, MAX_TENSORS, TensorEntry, read_header,
                                              read_rows, strict_json)
from daca_jax.config.checks import DTYPES
from daca_jax.config.model import ModelConfig

CONFIG_MAX_BYTES = 10_000_000  # a real config.json is ~2 kB; an index ~30 kB
INDEX_FILE, SINGLE_FILE = "model.safetensors.index.json", "model.safetensors"

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

# The config.json keys that set each dimension of a parameter (named when a tensor's shape differs).
_DIM_KEYS = {
    "llada": {"vocab": "embedding_size/vocab_size", "d_model": "d_model", "q": "n_heads", "kv": "n_kv_heads",
              "mlp": "mlp_hidden_size/mlp_ratio", "layers": "n_layers"},
    "dream": {"vocab": "vocab_size", "d_model": "hidden_size", "q": "num_attention_heads",
              "kv": "num_key_value_heads", "mlp": "intermediate_size", "layers": "num_hidden_layers"},
}


@dataclasses.dataclass(frozen=True)
class CheckpointFiles:
  """A checkpoint folder whose ``config.json``, index and shard headers passed validation.

  Attributes:
    path: the folder (resolved).
    hf: the parsed ``config.json``.
    tensors: ``{tensor name: TensorEntry}`` over all shards (the index's assignment).
    shards: the shard files, in the index's order.
  """

  path: pathlib.Path
  hf: dict[str, Any]
  tensors: dict[str, TensorEntry]
  shards: tuple[pathlib.Path, ...]

  @property
  def nbytes(self) -> int:
    """Bytes of tensor data in the shards (what the model's weights take at the checkpoint's dtype)."""
    return sum(e.end - e.begin for e in self.tensors.values())


def read_json_object(path: pathlib.Path, what: str) -> dict[str, Any]:
  """A JSON object from an untrusted file of a checkpoint folder, read through the folder boundary
  (:func:`daca_jax.models.checkpoint_folder.read_json`: a regular file inside the folder, at most
  :data:`CONFIG_MAX_BYTES`, strict and bounded JSON).

  Raises:
    DataError: the file is missing (naming ``what`` it should hold), not a regular file inside the
      folder, too large, not strict JSON, nested too deeply, or not an object.
  """
  folder = checkpoint_folder.root(path.parent)
  checkpoint_folder.require(folder, path.name, what)
  return checkpoint_folder.read_json(folder, path.name, max_bytes=CONFIG_MAX_BYTES)


def _shard_path(folder: pathlib.Path, name: Any, tensor: str) -> pathlib.Path:
  """The shard file the index names, which must be a plain ``<name>.safetensors`` file name."""
  where = f"{folder / INDEX_FILE}: tensor {tensor!r} is in shard"
  checkpoint_folder.check_name(folder, name, where)
  if not name.endswith(".safetensors"):
    raise DataError(f"{where} {name!r:.100}; expected a plain '<name>.safetensors' file name inside the "
                    "checkpoint folder")
  return folder / name


def open_checkpoint(path: str | pathlib.Path) -> CheckpointFiles:
  """Validates a checkpoint folder's files and reads every shard's header (no tensor data).

  Every file is reached through :mod:`daca_jax.models.checkpoint_folder` (regular files inside the
  folder, bounded sizes and JSON).

  Raises:
    DataError: not a folder; ``config.json`` missing or malformed; neither ``model.safetensors.index.json``
      nor ``model.safetensors``; an index without a ``weight_map`` of names to plain shard file names;
      a missing shard, or one that is not a regular file inside the folder; a malformed shard header
      (see :func:`~daca_jax.models.safetensors_file.read_header`); a tensor the index assigns to a
      shard whose header lacks it.
  """
  folder = checkpoint_folder.root(path)
  hf = read_json_object(folder / "config.json", "the model's config")
  index = folder / INDEX_FILE
  if checkpoint_folder.has(folder, INDEX_FILE):
    weight_map = read_json_object(index, "the tensor -> shard index").get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
      raise DataError(f"{index}: no 'weight_map' of tensor names to shard files")
    files = {t: _shard_path(folder, s, t) for t, s in weight_map.items()}
  elif checkpoint_folder.has(folder, SINGLE_FILE):
    files = None
  else:
    raise DataError(f"{folder}: neither {INDEX_FILE} nor {SINGLE_FILE} found (the weights)")
  shards = tuple(dict.fromkeys(files.values())) if files is not None else (folder / SINGLE_FILE,)
  headers, header_bytes, count = {}, 0, 0
  for shard in shards:
    if checkpoint_folder.member(folder, shard.name, where=str(index)) is None:
      listed = next(t for t, s in files.items() if s == shard)
      raise DataError(f"{index}: shard {shard.name} (tensor {listed!r} and others) does not exist")
    with checkpoint_folder.open_member(folder, shard.name, where=str(index)) as handle:
      headers[shard] = read_header(shard, handle)
      handle.seek(0)
      header_bytes += int.from_bytes(handle.read(8), "little")  # checked by read_header
    # The bounds of one header hold for the folder as a whole: an index may list thousands of shard
    # names, each a link to the same file with a header at the limit.
    count += len(headers[shard])
    if header_bytes > MAX_HEADER_BYTES or count > MAX_TENSORS:
      raise DataError(f"{index}: its shards' headers hold more than {MAX_HEADER_BYTES} bytes or "
                      f"{MAX_TENSORS} tensors in all (at {shard.name}); expected a LLaDA or Dream checkpoint")
  if files is None:
    tensors = dict(headers[shards[0]])
  else:
    tensors = {}
    for t, shard in files.items():
      if t not in headers[shard]:
        raise DataError(f"{index}: lists tensor {t!r} in {shard.name}, whose header does not hold it")
      tensors[t] = headers[shard][t]
  return CheckpointFiles(folder, hf, tensors, shards)


def hf_tensor_shapes(cfg: ModelConfig) -> dict[tuple[str, ...], tuple[tuple[int, ...], tuple[str, ...]]]:
  """Per parameter path: (the HF tensor's shape for one layer, the dimension names behind it).

  Pure arithmetic on the config, so that a config claiming absurd sizes is refused before any array is
  built (the test checks it against the model's own parameter shapes)."""
  d, hd = cfg.d_model, cfg.head_dim
  q, kv = cfg.n_heads * hd, cfg.kv_heads * hd
  out = {("embed", "embedding"): ((cfg.vocab_size, d), ("vocab", "d_model")),
         ("layers", "attn_norm", "scale"): ((d,), ("d_model",)),
         ("layers", "q_proj", "kernel"): ((q, d), ("q", "d_model")),
         ("layers", "k_proj", "kernel"): ((kv, d), ("kv", "d_model")),
         ("layers", "v_proj", "kernel"): ((kv, d), ("kv", "d_model")),
         ("layers", "o_proj", "kernel"): ((d, q), ("d_model", "q")),
         ("layers", "mlp_norm", "scale"): ((d,), ("d_model",)),
         ("layers", "gate_proj", "kernel"): ((cfg.mlp_dim, d), ("mlp", "d_model")),
         ("layers", "up_proj", "kernel"): ((cfg.mlp_dim, d), ("mlp", "d_model")),
         ("layers", "down_proj", "kernel"): ((d, cfg.mlp_dim), ("d_model", "mlp")),
         ("final_norm", "scale"): ((d,), ("d_model",))}
  if cfg.qkv_bias:
    out.update({("layers", "q_proj", "bias"): ((q,), ("q",)), ("layers", "k_proj", "bias"): ((kv,), ("kv",)),
                ("layers", "v_proj", "bias"): ((kv,), ("kv",))})
  if not cfg.tie_embeddings:
    out[("lm_head", "kernel")] = ((cfg.vocab_size, d), ("vocab", "d_model"))
  return out


@dataclasses.dataclass(frozen=True)
class _Param:
  """One model parameter and the checkpoint tensors (one per layer, or one) it is read from."""

  key: tuple[str, ...]
  entries: tuple[TensorEntry, ...]
  transpose: bool
  stacked: bool


def check_tensors(files: CheckpointFiles, cfg: ModelConfig, family: str) -> list[_Param]:
  """Every tensor the model of ``cfg`` needs, checked against the headers (nothing is read or allocated).

  Returns:
    The read plan of :func:`load_params`, one entry per parameter.
  Raises:
    DataError: naming the tensor: missing (for a layer beyond the checkpoint's, naming
      ``config.json:<n_layers key>`` and the layers present), a tensor of a layer beyond the config's
      ``n_layers`` (the checkpoint holds more layers than config.json says), a shape other than the config implies
      (naming the config.json keys behind each dimension), or a dtype that is not a float.
  """
  keys = _DIM_KEYS[family]
  expected = hf_tensor_shapes(cfg)
  layer_re = re.compile(re.escape(NAME_MAPS[family][1][1]).replace(r"\{i\}", r"(\d+)") + "$")
  present = sorted(int(m.group(1)) for t in files.tensors if (m := layer_re.match(t)))
  _check_no_extra_layers(files, cfg.n_layers, family)
  plan = []
  for key, template, transpose in NAME_MAPS[family]:
    if key not in expected:
      continue  # a parameter this config does not have (tied head, no biases)
    shape, dims = expected[key]
    stacked = key[0] == "layers"
    entries = []
    for i in range(cfg.n_layers if stacked else 1):
      name = template.format(i=i)
      entry = files.tensors.get(name)
      if entry is None:
        if stacked and i >= len(present):
          raise DataError(f"{files.path}: config.json:{keys['layers']}={cfg.n_layers}, but the checkpoint "
                          f"holds tensors for {len(present)} layers ({name!r} is missing)")
        raise DataError(f"{files.path}: tensor {name!r} is missing from the checkpoint (expected shape {shape})")
      if entry.shape != shape:
        why = ", ".join(f"{n} from config.json:{keys[k]}" for n, k in zip(shape, dims))
        raise DataError(f"{entry.path}: tensor {name!r} has shape {entry.shape}, expected {shape} ({why})")
      if entry.dtype not in FLOAT_CODES:
        raise DataError(f"{entry.path}: tensor {name!r} has dtype {entry.dtype}; expected a float weight "
                        f"({', '.join(FLOAT_CODES)})")
      entries.append(entry)
    plan.append(_Param(key, tuple(entries), transpose, stacked))
  return plan


def _check_no_extra_layers(files: CheckpointFiles, n_layers: int, family: str) -> None:
  """No tensor belongs to a layer the config does not have (a config.json claiming fewer layers than
  the weights hold would otherwise load, and train, a silently truncated model)."""
  prefix = NAME_MAPS[family][1][1].split("{i}")[0]
  any_layer = re.compile(re.escape(prefix) + r"(\d{1,9})\.")
  beyond = sorted((int(m.group(1)), t) for t in files.tensors
                  if (m := any_layer.match(t)) and int(m.group(1)) >= n_layers)
  if beyond:
    key = _DIM_KEYS[family]["layers"]
    raise DataError(f"{files.path}: config.json:{key}={n_layers}, but the checkpoint holds tensors of layer "
                    f"{beyond[-1][0]} ({len(beyond)} tensors beyond layer {n_layers - 1}, e.g. {beyond[0][1]!r}); "
                    f"expected config.json:{key} to equal the layers the weights hold")


def _slices(index: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[slice, ...]:
  """``index`` (from ``Sharding.addressable_devices_indices_map``) as one step-1 slice per dimension."""
  index = tuple(index) + (slice(None),) * (len(shape) - len(index))
  out = []
  for s, n in zip(index, shape):
    start, stop, step = s.indices(n)
    if step != 1:
      raise ValueError(f"a shard index with step {step}")
    out.append(slice(start, stop))
  return tuple(out)


def _reopen(entry: TensorEntry) -> Any:
  """The shard of ``entry`` opened again through the folder boundary, refused unless it is the very
  file whose header was checked (same device and inode): the weights are read long after the headers,
  and the folder may have changed meanwhile."""
  handle = checkpoint_folder.open_member(checkpoint_folder.root(entry.path.parent), entry.path.name)
  st = os.fstat(handle.fileno())
  if entry.file_id is not None and (st.st_dev, st.st_ino) != entry.file_id:
    handle.close()
    raise DataError(f"{entry.path}: replaced since its header was read (another file now); expected the "
                    "checkpoint folder to stay unchanged while it is loaded")
  return handle


class _Reader:
  """Reads one device's slice of a parameter from the shards (one open handle per shard file)."""

  def __init__(self, dtype: Any):
    self.dtype = np.dtype(dtype)
    self.handles: dict[pathlib.Path, Any] = {}

  def close(self) -> None:
    for f in self.handles.values():
      f.close()
    self.handles.clear()

  def _one(self, entry: TensorEntry, index: tuple[slice, ...], transpose: bool) -> np.ndarray:
    """``entry[index]`` in the parameter's layout: ``index`` is over the (transposed) parameter."""
    torch_index = index[::-1] if transpose else index
    handle = self.handles.get(entry.path)
    if handle is None:
      handle = self.handles[entry.path] = _reopen(entry)
    x = read_rows(entry, torch_index[0], handle)[(slice(None),) + torch_index[1:]]
    if not np.isfinite(x).all():
      bad = np.unravel_index(int(np.argmax(~np.isfinite(x))), x.shape)
      raise DataError(f"{entry.path}: tensor {entry.name!r} holds a non-finite value ({x[bad]} at "
                      f"{tuple(int(s.start) + int(b) for s, b in zip(torch_index, bad))})")
    return x.T if transpose else x

  def read(self, param: _Param, index: tuple[slice, ...]) -> np.ndarray:
    """The block ``index`` of ``param``'s value (layer axis first when stacked), in ``self.dtype``, as
    one C-contiguous buffer: the rows read from disk are cast and transposed while being copied into it
    (or are it, when nothing needs doing), never through a second temporary."""
    shape = tuple(s.stop - s.start for s in index)
    if not param.stacked:
      x = self._one(param.entries[0], index, param.transpose)
      if x.dtype == self.dtype and x.flags.c_contiguous:
        return x
      out = np.empty(shape, self.dtype)
      out[...] = x  # cast and transpose in one pass
      return out
    out = np.empty(shape, self.dtype)
    for j, i in enumerate(range(index[0].start, index[0].stop)):
      out[j] = self._one(param.entries[i], index[1:], param.transpose)
    return out


Placement = Callable[[tuple[int, ...]], jax.sharding.Sharding]


def load_params(files: CheckpointFiles, cfg: ModelConfig, family: str,
                placement: Placement | None = None) -> tuple[nnx.GraphDef, Params]:
  """The model of ``cfg`` with the checkpoint's weights, each placed straight into its sharding.

  Args:
    files: from :func:`open_checkpoint`.
    cfg: the model's config (from the checkpoint's ``config.json``); weights are cast to
      ``cfg.param_dtype`` slice by slice.
    family: "llada" or "dream" (tensor names, :data:`NAME_MAPS`).
    placement: ``shape -> Sharding`` of each parameter (e.g. FSDP's, :func:`daca_jax.parallel.fsdp_spec`
      over a mesh); None: uncommitted arrays on the default device, as :func:`daca_jax.models.init_model`
      makes them (committed ones would make every jitted step compile again for the adapters it returns).
  Returns:
    ``(graphdef, params)``: params an ``nnx.State`` like :func:`daca_jax.models.init_model`'s, of
    global ``jax.Array``s in ``placement``'s shardings.
  Raises:
    DataError: see :func:`check_tensors`; a non-finite weight; a shard cut short after its header.
  """
  plan = check_tensors(files, cfg, family)  # every shape and dtype, before anything is allocated
  abstract = nnx.eval_shape(lambda: Transformer(cfg, nnx.Rngs(0)))
  graphdef, state = nnx.split(abstract, nnx.Param)
  pure = nnx.to_pure_dict(state)
  reader = _Reader(DTYPES[cfg.param_dtype])
  try:
    for param in plan:
      node = pure
      for k in param.key[:-1]:
        node = node[k]
      shape = tuple(node[param.key[-1]].shape)
      read = lambda idx, p=param, s=shape: reader.read(p, _slices(idx, s))
      if placement is None:  # uncommitted, like freshly initialised parameters (one compiled program)
        node[param.key[-1]] = jax.device_put(read(()))  # no device: uncommitted (jnp.asarray copies twice)
      else:
        node[param.key[-1]] = jax.make_array_from_callback(shape, placement(shape), read, dtype=reader.dtype)
  finally:
    reader.close()
  left = [jax.tree_util.keystr(p) for p, v in jax.tree_util.tree_flatten_with_path(pure)[0]
          if not isinstance(v, jax.Array)]
  if left:
    raise DataError(f"{files.path}: no checkpoint tensor maps to model parameters {left}")
  nnx.replace_by_pure_dict(state, pure)
  return graphdef, state


def unused_tensors(files: CheckpointFiles, cfg: ModelConfig, family: str) -> tuple[str, ...]:
  """Checkpoint tensors that no parameter of ``cfg``'s model reads (e.g. a head the config ties)."""
  used = {e.name for p in check_tensors(files, cfg, family) for e in p.entries}
  return tuple(sorted(set(files.tensors) - used))


def param_bytes(cfg: ModelConfig) -> int:
  """Bytes of the model's parameters in ``cfg.param_dtype`` (from the config alone)."""
  per = {k: math.prod(s) for k, (s, _) in hf_tensor_shapes(cfg).items()}
  n = sum(v * (cfg.n_layers if k[0] == "layers" else 1) for k, v in per.items())
  return n * np.dtype(DTYPES[cfg.param_dtype]).itemsize


def describe(files: CheckpointFiles) -> str:
  """One line: the folder, its tensors and size."""
  return (f"{files.path} ({len(files.tensors)} tensors in {len(files.shards)} safetensors file"
          f"{'s' if len(files.shards) > 1 else ''}, {files.nbytes / 2**30:.2f} GiB)")

