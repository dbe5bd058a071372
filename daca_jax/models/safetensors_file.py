"""Validated, lazy reads of ``.safetensors`` files from an untrusted checkpoint folder.

The format (huggingface/safetensors ``README.md``, "Format"): 8 bytes little-endian ``N``, then ``N``
bytes of UTF-8 JSON ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str:
str}}``, then the data section; offsets are relative to the start of the data section, tensors are
row-major and little-endian.

Why not ``safetensors.safe_open``: its numpy reader cannot return bfloat16 (numpy has no such type) and
its flax reader places every tensor on the default accelerator, while the checkpoint loader needs
*slices* of bfloat16 tensors on the host (one device's shard at a time, never the whole model), and a
hostile file must fail with one error that names the file and what is wrong. :func:`read_header`
checks everything the header claims against the file before a byte of data is read; the tests compare
every read with ``safetensors.numpy.load_file``.

Data is read with ``pread`` into fresh buffers (no memory map), so the host holds only the rows asked
for and a process's resident memory measures what the loader really keeps.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import stat
import sys
from typing import Any, BinaryIO

import ml_dtypes
import numpy as np

from daca_jax.errors import DataError

# The safetensors reference refuses headers above 100 MB (safetensors/src/tensor.rs, MAX_HEADER_SIZE).
MAX_HEADER_BYTES = 100_000_000
# Tensors one file may hold. A header is parsed into Python objects of about 1 kB per tensor, so a
# 100 MB header of a million empty tensors would take gigabytes; released LLaDA / Dream shards hold a
# few hundred (the largest hub checkpoints, with hundreds of experts per layer, ~10^5).
MAX_TENSORS = 200_000
MAX_RANK = 8
# Every dtype code of the format, with the numpy type it is read as (None: recognised, never read).
DTYPE_CODES: dict[str, tuple[int, Any]] = {
    "BOOL": (1, np.bool_), "U8": (1, np.uint8), "I8": (1, np.int8), "F8_E5M2": (1, None),
    "F8_E4M3": (1, None), "I16": (2, np.int16), "U16": (2, np.uint16), "F16": (2, np.float16),
    "BF16": (2, ml_dtypes.bfloat16), "I32": (4, np.int32), "U32": (4, np.uint32), "F32": (4, np.float32),
    "F64": (8, np.float64), "I64": (8, np.int64), "U64": (8, np.uint64),
}
FLOAT_CODES = ("F16", "BF16", "F32", "F64")  # the dtypes a weight may be stored in


def strict_json(text: bytes | str, where: str) -> Any:
  """``json.loads`` refusing NaN/Infinity constants and duplicate keys (which Python would accept,
  silently keeping the last).

  Raises:
    DataError: naming ``where``, when the text is not such JSON (or not UTF-8).
  """

  def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
      if k in out:
        raise ValueError(f"duplicate key {k!r}")
      out[k] = v
    return out

  def no_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")

  try:
    if isinstance(text, bytes):
      text = text.decode("utf-8")
    return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
  except UnicodeDecodeError as e:
    raise DataError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
  except ValueError as e:  # JSONDecodeError is one
    raise DataError(f"{where}: not valid JSON ({e})") from None
  except RecursionError:
    raise DataError(f"{where}: not valid JSON (nested too deeply)") from None


@dataclasses.dataclass(frozen=True)
class TensorEntry:
  """One tensor of a safetensors file, as its (validated) header describes it.

  Attributes:
    path: the file.
    name: the tensor's name.
    dtype: the format's dtype code ("BF16", "F32", ...).
    shape: its shape (row-major).
    begin: absolute file offset of its first byte; end: one past its last byte.
  """

  path: pathlib.Path
  name: str
  dtype: str
  shape: tuple[int, ...]
  begin: int
  end: int
  file_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the file the header was read from

  @property
  def itemsize(self) -> int:
    return DTYPE_CODES[self.dtype][0]


def _fail(path: pathlib.Path, what: str) -> DataError:
  return DataError(f"{path}: malformed safetensors file: {what}")


def _entry(path: pathlib.Path, name: str, spec: Any, data_start: int, data_size: int,
           file_id: tuple[int, int] | None = None) -> TensorEntry:
  """A header entry checked field by field (dtype code, shape, offsets in range, size = shape x dtype)."""
  where = f"tensor {name!r}"
  if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data_offsets"}:
    raise _fail(path, f"{where}: expected {{'dtype', 'shape', 'data_offsets'}}, found {spec!r:.200}")
  dtype, shape, offsets = spec["dtype"], spec["shape"], spec["data_offsets"]
  if not isinstance(dtype, str) or dtype not in DTYPE_CODES:
    raise _fail(path, f"{where}: unknown dtype {dtype!r:.50} (the format's: {sorted(DTYPE_CODES)})")
  is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)
  if (not isinstance(shape, list) or len(shape) > MAX_RANK
      or not all(is_int(n) and n >= 0 for n in shape)):
    raise _fail(path, f"{where}: shape {shape!r:.200} is not a list of at most {MAX_RANK} sizes >= 0")
  if not (isinstance(offsets, list) and len(offsets) == 2 and all(is_int(o) for o in offsets)
          and 0 <= offsets[0] <= offsets[1] <= data_size):
    raise _fail(path, f"{where}: data_offsets {offsets!r:.200} are not [begin, end] within the "
                f"{data_size}-byte data section (file truncated?)")
  need = math.prod(shape) * DTYPE_CODES[dtype][0]
  if offsets[1] - offsets[0] != need:
    raise _fail(path, f"{where}: data_offsets {offsets} hold {offsets[1] - offsets[0]} bytes; "
                f"{dtype} x {tuple(shape)} needs {need}")
  return TensorEntry(path, name, dtype, tuple(shape), data_start + offsets[0], data_start + offsets[1], file_id)


def open_regular(path: str | os.PathLike) -> BinaryIO:
  """``path`` opened for binary reading when it is a regular file, checked on the open descriptor
  (opened without blocking, so a FIFO cannot hang the open). Files of a checkpoint folder are opened
  through :func:`daca_jax.models.checkpoint_folder.open_member` instead, which also keeps them inside
  the folder.

  Raises:
    DataError: no such file, or not a regular file.
  """
  path = pathlib.Path(path)
  try:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
  except OSError as e:
    raise DataError(f"{path}: safetensors file not readable ({e.strerror})") from None
  f = os.fdopen(fd, "rb")
  if not stat.S_ISREG(os.fstat(fd).st_mode):
    f.close()
    raise DataError(f"{path}: not a regular file (expected a safetensors file)")
  os.set_blocking(fd, True)
  return f


def read_header(path: str | os.PathLike, handle: BinaryIO | None = None) -> dict[str, TensorEntry]:
  """The tensors of a safetensors file, every claim of the header checked against the file.

  Only the header is read (at most :data:`MAX_HEADER_BYTES`); no tensor data.

  Args:
    path: the file (named in errors and in the entries).
    handle: the file, already opened (and checked) by the caller; None opens ``path``
      (:func:`open_regular`). The size and identity checked are those of the open file.
  Returns:
    ``{name: TensorEntry}`` (``__metadata__`` is checked to be a str -> str map and dropped); each
    entry records the file's ``(st_dev, st_ino)``, so that a reader can tell the same file.
  Raises:
    DataError: naming the file and the fault: not a regular file, shorter than 8 bytes, a header length
      of 0, above the limit or past the end of the file, a header that is not a UTF-8 JSON object
      (duplicate keys and NaN included), more than :data:`MAX_TENSORS` tensors, an entry without
      ``dtype`` / ``shape`` / ``data_offsets``, an unknown dtype, a bad shape, offsets outside the data
      section or not matching shape x dtype, or two tensors whose bytes overlap.
  """
  path = pathlib.Path(path)
  own = handle is None
  f = open_regular(path) if own else handle
  try:
    st = os.fstat(f.fileno())
    size, file_id = st.st_size, (st.st_dev, st.st_ino)
    if size < 8:
      raise _fail(path, f"{size} bytes, shorter than the 8-byte header length")
    f.seek(0)
    n = int.from_bytes(f.read(8), "little")
    if n == 0 or n > MAX_HEADER_BYTES:
      raise _fail(path, f"header length {n} is not in [1, {MAX_HEADER_BYTES}] (not a safetensors file?)")
    if 8 + n > size:
      raise _fail(path, f"header length {n} runs past the end of the {size}-byte file (truncated?)")
    raw = f.read(n)
  finally:
    if own:
      f.close()
  if len(raw) != n:
    raise _fail(path, f"header length {n}, but the file ends after {len(raw)} header bytes (truncated?)")
  # Counted on the bytes, before json builds an object per tensor: every entry names its data_offsets.
  if raw.count(b'"data_offsets"') > MAX_TENSORS:
    raise _fail(path, f"more than {MAX_TENSORS} tensors in one file")
  header = strict_json(raw, f"{path}: safetensors header")
  if not isinstance(header, dict):
    raise _fail(path, f"the header is a JSON {type(header).__name__}, not an object")
  meta = header.pop("__metadata__", {})
  if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
    raise _fail(path, "__metadata__ is not a map of strings to strings")
  data_start = 8 + n
  entries = {name: _entry(path, name, spec, data_start, size - data_start, file_id)
             for name, spec in header.items()}
  spans = sorted((e.begin, e.end, e.name) for e in entries.values() if e.end > e.begin)
  for (_, end0, a), (begin1, _, b) in zip(spans, spans[1:]):
    if begin1 < end0:
      raise _fail(path, f"tensors {a!r} and {b!r} overlap (bytes {begin1}..{end0})")
  return entries


def read_rows(entry: TensorEntry, rows: slice = slice(None), handle: Any = None) -> np.ndarray:
  """Rows ``rows`` (along the first dimension) of a float tensor, as host numpy in its own dtype.

  Args:
    entry: from :func:`read_header`; its dtype must be a numpy-readable code.
    rows: a step-1 slice of the first dimension (the whole tensor for a 0-d one).
    handle: an open binary file of ``entry.path`` to read from (opened here when None).
  Returns:
    ``[len(rows), *shape[1:]]`` array, a fresh buffer (no memory map).
  Raises:
    DataError: the file ends before the tensor's bytes (truncated after the header was read).
  """
  np_type = DTYPE_CODES[entry.dtype][1]
  if np_type is None:
    raise DataError(f"{entry.path}: tensor {entry.name!r} has dtype {entry.dtype}, which cannot be read")
  if sys.byteorder != "little":  # the format is little-endian; ml_dtypes' bfloat16 is native only
    raise DataError("reading safetensors needs a little-endian host")
  shape = entry.shape if entry.shape else (1,)
  start, stop, step = rows.indices(shape[0])
  if step != 1:
    raise ValueError(f"read_rows takes a step-1 slice, got {rows}")
  stop = max(stop, start)
  row_bytes = math.prod(shape[1:]) * entry.itemsize
  count = (stop - start) * row_bytes
  buf = np.empty(count, np.uint8)
  own = handle is None
  f = open_regular(entry.path) if own else handle
  try:
    f.seek(entry.begin + start * row_bytes)
    got = f.readinto(memoryview(buf)) if count else 0
  finally:
    if own:
      f.close()
  if got != count:
    raise DataError(f"{entry.path}: tensor {entry.name!r} ends past the end of the file (read {got} of "
                    f"{count} bytes; truncated?)")
  out = buf.view(np_type).reshape((stop - start,) + shape[1:])
  return out if entry.shape else out.reshape(())
