"""The identity of a Hugging Face checkpoint folder, recorded when a run starts from it and checked
before its trained policy is written back in that folder's layout.

A LoRA run's trained policy is the source weights plus adapters, and every export copies the source's
``config.json``, tokenizer and remote-code files: exporting against a folder that was replaced (another
revision, another model under the same path, a re-download that failed half-way) would silently write
a model nobody trained. :func:`fingerprint` summarises each top-level file of the folder;
:func:`record_source` stores it in the run's workdir (``init_checkpoint.json``) and
:func:`check_source` compares a folder with that record.

What a fingerprint covers: every top-level regular file inside the folder (symlinks followed when their
target lies inside it or, for a Hugging Face cache snapshot, in its ``blobs/``:
:func:`daca_jax.models.checkpoint_folder.entries`; links out of the folder, FIFOs and devices are never
opened; hidden entries such as ``.cache/`` skipped). A file up to :data:`FULL_HASH_BYTES` is hashed
whole (``config.json``, tokenizer files, ``*.py``, the shard index); a larger one (a weight shard) by its
size, its first and last MiB (a safetensors header, with every tensor's name, dtype, shape and
offsets, is at the start) and 16 evenly spaced 64 KiB blocks: a different checkpoint, revision,
dtype or a truncated download is caught in milliseconds per shard, a single flipped bit in the middle
of a 5 GB shard is not (the run's own checkpoints carry checksums for that).
"""
from __future__ import annotations

import hashlib
import os
import pathlib
from typing import Any

from daca_jax import storage
from daca_jax.errors import DataError
from daca_jax.io_utils import atomic_write_json, read_json
from daca_jax.models import checkpoint_folder

RECORD_FILE = "init_checkpoint.json"  # in the run's workdir
FULL_HASH_BYTES = 64 * 2**20
_EDGE = 2**20  # bytes hashed at each end of a large file
_BLOCK, _BLOCKS = 64 * 2**10, 16  # sampled blocks in between


def _file_digest(path: pathlib.Path) -> str:
  """``"<size>:<sha256 hex>"`` of a file: all of it, or its ends and sampled blocks when large."""
  size = path.stat().st_size
  h = hashlib.sha256()
  with path.open("rb") as f:
    if size <= FULL_HASH_BYTES:
      for chunk in iter(lambda: f.read(2**20), b""):
        h.update(chunk)
    else:
      step = (size - 2 * _EDGE) // (_BLOCKS + 1)
      for offset, n in ([(0, _EDGE)] + [(_EDGE + step * (i + 1), _BLOCK) for i in range(_BLOCKS)]
                        + [(size - _EDGE, _EDGE)]):
        f.seek(offset)
        h.update(f.read(n))
  return f"{size}:{h.hexdigest()}"


def fingerprint(path: str | os.PathLike) -> dict[str, str]:
  """``{file name: "<size>:<sha256>"}`` of every top-level regular file of checkpoint folder ``path``.

  Raises:
    DataError: ``path`` is not a directory.
  """
  if not pathlib.Path(path).expanduser().is_dir():
    raise DataError(f"{path}: not a checkpoint directory")
  folder = checkpoint_folder.root(path)
  return {e.name: _file_digest(e.path) for e in checkpoint_folder.entries(folder) if e.kind == "file"}


def record_source(workdir: str | os.PathLike, path: str | os.PathLike) -> dict[str, Any]:
  """Writes ``<workdir>/init_checkpoint.json``: the source folder's absolute path and fingerprint.

  Called once when a run starts from ``model.init_checkpoint`` (process 0 only); returns the record.
  """
  record = {"path": str(pathlib.Path(path).expanduser().resolve()), "files": fingerprint(path)}
  atomic_write_json(storage.as_path(workdir) / RECORD_FILE, record)
  return record


def read_record(workdir: str | os.PathLike) -> dict[str, Any]:
  """The record :func:`record_source` wrote.

  Raises:
    DataError: no record (the message names the file and what writes it), or a damaged one.
  """
  file = storage.as_path(workdir) / RECORD_FILE
  if not file.is_file():
    raise DataError(f"{file} is missing: the run did not record which checkpoint folder it started from "
                    "(training writes it when it loads model.init_checkpoint), so its source cannot be verified")
  record = read_json(file, fix="it is written when a run starts from model.init_checkpoint; it cannot be "
                     "rebuilt for a folder that may have changed since")
  if not isinstance(record.get("path"), str) or not isinstance(record.get("files"), dict):
    raise DataError(f"{file}: expected {{'path': str, 'files': {{name: digest}}}}, found keys {sorted(record)}")
  return record


def check_source(workdir: str | os.PathLike, path: str | os.PathLike) -> None:
  """Checks that folder ``path`` is the checkpoint the run in ``workdir`` started from.

  Raises:
    DataError: ``path`` does not exist (the folder moved: the message says how to point at it), or its
      fingerprint differs from the record (the message names the files that changed, appeared or went
      missing), or there is no record (:func:`read_record`).
  """
  record = read_record(workdir)
  folder = pathlib.Path(path).expanduser()
  if not folder.is_dir():
    raise DataError(f"source checkpoint {path} (recorded by the run as model.init_checkpoint) is not a "
                    "directory: it moved or was deleted; pass --source=<folder> pointing at the same "
                    "checkpoint (its fingerprint is checked)")
  found, want = fingerprint(folder), record["files"]
  changed = sorted(n for n in set(found) & set(want) if found[n] != want[n])
  missing, added = sorted(set(want) - set(found)), sorted(set(found) - set(want))
  if changed or missing or added:
    parts = [f"{label}: {names[:8]}" for label, names in (("changed", changed), ("missing", missing),
                                                           ("new", added)) if names]
    raise DataError(f"source checkpoint {folder} is not the folder the run started from "
                    f"({record['path']}): {'; '.join(parts)}. Point --source at the original checkpoint")
