"""Workdir files written atomically and read defensively.

Every JSON/text file a run keeps in its workdir (``config.json``, ``results.json``, the cached
``eval_*.json``, summaries) goes through :func:`atomic_write_text`: the text is written to a
temporary file in the same directory, flushed to disk and renamed over the target, so a process
killed mid-write leaves the old file or the new one, never half of one.

Folders written as a whole (an exported model) go through :func:`atomic_directory`: filled under a
hidden temporary name, renamed into place when complete.

Reading: :func:`read_json` raises :class:`~daca_jax.errors.DataError` naming the file, what is wrong
and what to do; :func:`read_json_cache` is for files the run can recompute (a damaged cache is
reported in one line and treated as missing).
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import pathlib
import re
import shutil
import tempfile
from typing import Any, Callable

from daca_jax import storage
from daca_jax.errors import ConfigError, DataError


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
  """Replaces ``path`` with ``text`` (UTF-8) atomically: a temporary file beside it, fsync, rename.

  Raises:
    OSError: the directory is not writable, the disk is full, ... (the target is left unchanged and
      no temporary file remains).
  """
  atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
  """Replaces ``path`` with ``data`` atomically (as :func:`atomic_write_text`; raises as it does). On a
  ``gs://`` path, one object upload (:func:`daca_jax.storage.write_bytes`)."""
  storage.write_bytes(path, data)


def atomic_write_json(path: str | os.PathLike, obj: Any, **dumps_kwargs: Any) -> None:
  """:func:`atomic_write_text` of ``json.dumps(obj, indent=2, **dumps_kwargs)``."""
  atomic_write_text(path, json.dumps(obj, **{"indent": 2, **dumps_kwargs}))


def _load(path: Any) -> Any:
  """``json.loads`` of the file; raises ValueError (JSON or UTF-8) with a short reason."""
  try:
    return json.loads(path.read_text(encoding="utf-8"))
  except json.JSONDecodeError as e:
    raise ValueError(f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno}; "
                     "truncated or overwritten?)") from None
  except UnicodeDecodeError as e:
    raise ValueError(f"not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_json(path: str | os.PathLike, *, fix: str, kind: type | None = dict) -> Any:
  """Reads a JSON file that cannot be recomputed.

  Args:
    path: the file (must exist).
    fix: what the user should do when it is damaged (one sentence), e.g. "delete it to ...".
    kind: the type the document must have (None: any).
  Raises:
    FileNotFoundError: ``path`` does not exist.
    DataError: the file is a folder, not valid JSON (e.g. cut short by a killed write) or not of
      ``kind``; the message names the file and says what to do.
  """
  path = storage.as_path(path)
  if path.is_dir():  # else IsADirectoryError, an OSError: exit status 1 and no word on what to give
    raise DataError(f"{path} is a folder, not a JSON file; {fix}")
  try:
    value = _load(path)
  except ValueError as e:
    raise DataError(f"{path} is damaged: {e}; {fix}") from None
  if kind is not None and not isinstance(value, kind):
    raise DataError(f"{path} is damaged: expected a JSON {kind.__name__}, found {type(value).__name__}; {fix}")
  return value


def read_json_cache(path: str | os.PathLike, log: Callable[[str], None] = print,
                    kind: type | None = dict) -> Any | None:
  """Reads a JSON file the run can rebuild: ``None`` when it is missing or damaged (said in one line).

  A damaged file is left in place; the caller recomputes it and overwrites it.
  """
  path = storage.as_path(path)
  if not path.exists():
    return None
  try:
    value = _load(path)
    if kind is not None and not isinstance(value, kind):
      raise ValueError(f"expected a JSON {kind.__name__}, found {type(value).__name__}")
  except (ValueError, OSError) as e:
    log(f"WARNING: {path} is damaged ({e}); recomputing it.")
    return None
  return value


# ``scheme://...``: an object-store (gs://, s3://) or other URL, not a path of this machine's file system. A
# scheme has two letters or more, so that a Windows drive (``C:/x``, ``C://x``) is a path. ``pathlib.Path``
# folds ``gs://b`` into ``gs:/b``, so a path object is matched with one slash.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
_FOLDED_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")
# An object store's or a web scheme without its slashes (``gs:bucket/run``): a typo of a URL, which the file
# system would take as a local folder named ``gs:bucket``.
_BARE_SCHEME = re.compile(r"^(gs|gcs|s3|s3a|s3n|file|https?|hdfs|az|abfss?|wasbs?|ftp|sftp|hf)\s*:", re.I)
# Linux's limits: a name in a folder (NAME_MAX) and a whole path (PATH_MAX); a run writes its own files up to
# about 250 characters deep below its folder, so a longer folder fails at its first checkpoint, not here.
_NAME_MAX, _PATH_MAX, _BELOW = 255, 4096, 256

URL_NOT_SUPPORTED = ("a path of this machine's file system (this one is read or written locally; a run's "
                     "--workdir may be gs://bucket/folder, other URLs nowhere)")
WORKDIR_URLS = "a folder path, or a gs://bucket/folder URL (the only URL scheme a workdir may have)"


def is_url(path: str | os.PathLike | None) -> bool:
  """Whether ``path`` is a URL (``gs://bucket/run``, ``s3://...``, ``file://...``, also as a ``pathlib.Path``,
  which reads it as ``gs:/bucket/run``) rather than a file path."""
  if path is None:
    return False
  pattern = _FOLDED_URL if isinstance(path, os.PathLike) else _URL
  text = os.fspath(path).strip() if isinstance(path, os.PathLike) else str(path).strip()
  return bool(pattern.match(text) or _BARE_SCHEME.match(text))


def _local(path: str | os.PathLike, flag: str) -> pathlib.Path:
  """``path`` with ``~`` and ``~user`` expanded, made absolute, checked for what the file system would refuse
  only later (or misread).

  Raises:
    ConfigError: naming ``flag``: leading or trailing white space (`` /tmp/x`` is the folder ``' '`` of the
      current directory), ``~user`` of no user of this machine, a name longer than 255 bytes, a path too long to
      hold a run's files.
  """
  text = os.fspath(path)
  if text != text.strip():
    raise ConfigError(flag, text, "a path without leading or trailing white space")
  try:
    out = pathlib.Path(text).expanduser().absolute()
  except RuntimeError:  # pathlib: "Could not determine home directory."
    raise ConfigError(flag, text, "a path whose '~user' names a user of this machine") from None
  long = [n for n in out.parts if len(n.encode(errors="surrogateescape")) > _NAME_MAX]
  if long:
    raise ConfigError(flag, text, f"a path whose names have at most {_NAME_MAX} bytes each ({long[0][:40]!r}... "
                      f"has {len(long[0].encode(errors='surrogateescape'))})")
  if len(os.fsencode(out)) > _PATH_MAX - _BELOW:
    raise ConfigError(flag, text, f"a path of at most {_PATH_MAX - _BELOW} bytes (this one has "
                      f"{len(os.fsencode(out))}; the files written below it need the rest of {_PATH_MAX})")
  return out


def check_local_path(path: str | os.PathLike | None, flag: str) -> None:
  """Refuses a URL where a path of this machine is needed (:func:`is_url`); ``pathlib`` would otherwise
  read ``gs://bucket/run`` as the relative folders ``gs:/bucket/run``.

  Raises:
    ConfigError: naming ``flag``, the URL and what is allowed.
  """
  if is_url(path):
    raise ConfigError(flag, str(path), URL_NOT_SUPPORTED)


def check_dir_path(path: str | os.PathLike | None, flag: str) -> pathlib.Path:
  """The absolute path of a folder a command writes into (made if missing, added to if there),
  checked before any work starts, so that a bad path costs nothing and no output lands elsewhere.

  Args:
    path: the folder, as given.
    flag: its flag or field (``--workdir``), named in the error.
  Raises:
    ConfigError: ``path`` is empty (it would be the current directory), a URL (``gs://...``,
      :func:`check_local_path`), a file, or under a file (or is, or is under, a symlink loop).
  """
  check_local_path(path, flag)
  if path is None or not str(path).strip():
    raise ConfigError(flag, "" if path is None else str(path), "a folder path (an empty one would write into "
                      "the current directory; give '.' for that)")
  out = _local(path, flag)
  blocker = _file_at_or_above(out)
  if blocker is not None:
    raise ConfigError(flag, str(path), "a folder; " + ("it is " if blocker == out else f"{blocker} is ")
                      + _what(blocker))
  return out


def check_folder_or_bucket(path: str | os.PathLike | None, flag: str) -> Any | None:
  """Refuses what is neither a local path nor a ``gs://bucket/folder`` URL (a folder that may be in a bucket:
  a workdir, a TFDS data directory); the bucket is not contacted.

  Returns:
    The ``gs://`` folder as an ``etils.epath.Path``; None for a local path (the caller checks it).
  Raises:
    ConfigError: naming ``flag``: ``gs:/`` with one slash, a URL of another scheme, a ``gs://`` URL that is not
      a folder in a bucket, or ``gs://`` without gcsfs installed.
  """
  if path is not None and not isinstance(path, os.PathLike) and re.match(r"^\s*gs\s*:(?!//)", str(path), re.I):
    raise ConfigError(flag, str(path), "a gs://bucket/folder URL (two slashes after 'gs:'), or a local folder path")
  if not storage.is_remote(path):
    if is_url(path):
      raise ConfigError(flag, str(path), WORKDIR_URLS)
    return None
  if not isinstance(path, os.PathLike) and str(path) != str(path).strip():
    raise ConfigError(flag, str(path), "a gs://bucket/folder URL without leading or trailing white space")
  problem = storage.remote_problem(os.fspath(path))
  if problem is not None:
    raise ConfigError(flag, str(path), problem)
  try:
    return storage.as_path(path)
  except ImportError:
    raise ConfigError(flag, str(path), f"a local folder, or gs:// with gcsfs installed "
                      f"({storage.REMOTE_EXTRA})") from None


def check_workdir_path(path: str | os.PathLike | None, flag: str) -> Any:
  """A run's workdir as a path object, checked before any work: a ``gs://bucket/folder`` URL
  (:func:`check_folder_or_bucket`; an ``etils.epath.Path``), or a local folder as :func:`check_dir_path`
  checks it (a ``pathlib.Path``).

  Raises:
    ConfigError: naming ``flag``: see :func:`check_folder_or_bucket` and :func:`check_dir_path`.
  """
  remote = check_folder_or_bucket(path, flag)
  return remote if remote is not None else check_dir_path(path, flag)


def existing_workdir(path: str | os.PathLike, flag: str = "--workdir") -> Any:
  """The workdir of a run to read (an evaluation, an export): a local folder, resolved, or a ``gs://`` one
  (:func:`check_folder_or_bucket`); whether it holds a run is for the reader to say.

  Raises:
    ConfigError: naming ``flag``: see :func:`check_folder_or_bucket`.
  """
  remote = check_folder_or_bucket(path, flag)
  return remote if remote is not None else _local(path, flag).resolve()


def make_dir(path: str | os.PathLike) -> pathlib.Path:
  """Makes the folder ``path`` and its parents where missing; returns ``path``.

  A symlink that leads nowhere yet is followed and its target made, as the writers of whole folders
  (:func:`atomic_directory`) do; ``Path.mkdir`` would raise FileExistsError on the link itself. A ``gs://``
  folder is a key prefix: nothing to make.
  """
  if storage.is_remote(path):
    return storage.as_path(path)
  path = pathlib.Path(path)
  pathlib.Path(os.path.realpath(path)).mkdir(parents=True, exist_ok=True)
  return path


def _loops(path: pathlib.Path) -> bool:
  """Whether ``path`` is a symlink loop (its links lead back to themselves; ``exists()`` says False)."""
  try:
    os.stat(path)
  except OSError as e:
    return e.errno == errno.ELOOP
  return False


def _what(blocker: pathlib.Path) -> str:
  """What ``blocker`` (from :func:`_file_at_or_above`) is, for an error message."""
  return "a symlink loop" if _loops(blocker) else "a file"


def _file_at_or_above(path: pathlib.Path) -> pathlib.Path | None:
  """The nearest existing one of ``path`` and its parents when it is not a folder (nothing can be made
  there or below it), else None. A symlink loop blocks too (making a folder there fails with "File
  exists"); a dangling link does not (an export is written where it leads)."""
  for p in (path, *path.parents):
    if p.exists():
      return None if p.is_dir() else p
    if p.is_symlink() and _loops(p):
      return p
  return None


def check_file_path(path: str | os.PathLike, flag: str) -> pathlib.Path:
  """The absolute path of a file a command writes at its end, checked before any work starts.

  Raises:
    ConfigError: ``path`` is empty, a URL (:func:`check_local_path`), a folder, or under a file.
  """
  check_local_path(path, flag)
  if not str(path).strip():
    raise ConfigError(flag, str(path), "a file path")
  out = _local(path, flag)
  if out.is_dir():
    raise ConfigError(flag, str(path), "a file path; it is a folder")
  blocker = _file_at_or_above(out.parent)
  if blocker is not None:
    raise ConfigError(flag, str(path), f"a file path in a folder; {blocker} is {_what(blocker)}")
  return out


def check_output_dir(path: str | os.PathLike, *, overwrite: bool, flag: str = "--output_dir") -> pathlib.Path:
  """The absolute path of an output folder that :func:`atomic_directory` may fill, checked before any
  work starts.

  Raises:
    ConfigError: ``path`` is empty, a file or under a file (:func:`check_dir_path`).
    DataError: ``path`` is a folder that is not empty while ``overwrite`` is False (the message names
      ``flag`` and says to pass ``--overwrite`` or choose another folder).
  """
  out = check_dir_path(path, flag)
  if out.is_dir() and any(out.iterdir()) and not overwrite:
    raise DataError(f"{flag}={path} exists and is not empty: choose another folder or pass --overwrite "
                    "to replace it")
  return out


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, *, overwrite: bool = False):
  """Yields an empty temporary folder beside ``path`` that becomes ``path`` when the block succeeds.

  The folder is ``.<name>.tmp-XXXXXXXX`` in the same parent (same file system, so the final rename is
  atomic): a process killed or failing inside the block leaves ``path`` as it was (a killed one also
  leaves that hidden folder, never a half-written ``path``). An existing empty ``path`` is replaced;
  a non-empty one only with ``overwrite``: it is moved aside to ``.<name>.old-XXXXXXXX/``, the new
  folder renamed in, then the old one deleted (a crash between the two renames leaves no ``path`` and
  the previous folder in that hidden one, never a mix of both).

  Raises:
    DataError: see :func:`check_output_dir`.
  """
  out = check_output_dir(path, overwrite=overwrite)
  out.parent.mkdir(parents=True, exist_ok=True)
  tmp = pathlib.Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
  try:
    yield tmp
    old = None
    if out.is_dir() and any(out.iterdir()):
      old = pathlib.Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
      os.replace(out, old / out.name)
    os.replace(tmp, out)  # onto a missing or empty folder: atomic
    if old is not None:
      shutil.rmtree(old, ignore_errors=True)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
