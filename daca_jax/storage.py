"""The run's file layer: one set of file operations over a local folder or a Google Cloud Storage prefix.

A pod's hosts share no disk, so a run's workdir may be ``gs://bucket/path``. Everything the job, the
evaluation and the export read or write in a workdir goes through these functions (paths as ``str`` or path
objects), which act on the local file system for a path and on the bucket, through ``gcsfs`` (the fsspec
backend that ``etils.epath`` and orbax also use), for a ``gs://`` URL. Checkpoints' arrays go through orbax,
which writes ``gs://`` with TensorStore.

What each operation guarantees:

* :func:`write_bytes`: a reader sees the old content or the new one, never a part. Locally a temporary file
  beside the target, fsync, rename; on GCS one object upload (an object is replaced whole, there is no rename).
* :func:`create_new`: creates a file only if it is absent (``O_CREAT | O_EXCL`` locally; on GCS an upload with
  the precondition ``ifGenerationMatch=0``, which the server enforces). The workdir lease's mutex is built on it.
* :func:`append_bytes`: locally an append, flushed and fsynced; on GCS (which cannot append) the object is
  read and written back whole on the condition that nobody wrote it in between (``ifGenerationMatch``, read
  again on a conflict), so each append is atomic, none is lost to a concurrent writer, and its cost grows with
  the file (the job's appended files are its metrics and generation logs, a few MB at most).
* Listing and stat never come from a cache: gcsfs's listings cache is turned off for ``gs``, because other
  writers (orbax's TensorStore, another host, a second run) change the bucket behind it.

Errors: every failure of a bucket operation is an ``OSError`` (gcsfs's ``FileNotFoundError`` for a missing
object; :class:`RemoteError` for what the server, the network or the credentials answered, where gcsfs raises
its own ``HttpError``, aiohttp's or google-auth's types), so a caller's ``except OSError`` covers a bucket as it
covers a disk.

Other URL schemes (``s3://``, ``file://``) are refused where a workdir is given
(:func:`daca_jax.io_utils.check_workdir_path`).
"""
from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import re
import shutil
import tempfile
import time
from typing import Any, Iterator

REMOTE_PREFIX = "gs://"
# One dot-separated part of a bucket name (GCS's naming rules): lower-case letters, digits, '-' and '_',
# starting and ending with a letter or digit, at most 63 characters.
_BUCKET_PART = re.compile(r"[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?")
_BUCKET_RULE = ("3-63 characters (up to 222 with dots, 63 between dots) of lower-case letters, digits, '-', '_' "
                "and '.', each part starting and ending with a letter or digit, not an IP address, not starting "
                "with 'goog'")
# The characters a folder under the bucket may have: TensorStore reads '?' and '#' as a URL's query and
# fragment (the arrays of gs://b/q?a would go to gs://b/q), gcsfs reads '*' and '[' as a glob.
_KEY_CHARS = re.compile(r"[A-Za-z0-9._~=+,@/-]*")
# GCS limits an object's name to 1024 bytes; what a run writes below its folder (orbax's step folders and
# array chunks, the evaluation files) takes up to about 200 more, so a longer folder would pass every check and
# fail at its first checkpoint.
MAX_FOLDER_BYTES = 768
REMOTE_EXTRA = "pip install -e '.[gcs]'"
_APPEND_TRIES = 8  # conflicting writers of one appended object, re-read and retried before giving up


# The bucket clients' own error types live in these packages (google's protobuf, say, is not one of them).
_TRANSPORT_MODULES = ("gcsfs.", "aiohttp.", "google.auth.", "google.api_core.", "google.cloud.",
                      "google.resumable_media.", "requests.", "urllib3.")


class RemoteError(OSError):
  """A bucket operation failed: the server's answer (HTTP ``code``), the network or the credentials.

  Attributes:
    code: the HTTP status when the server answered one (e.g. 403, 429, 503), else None.
  """

  def __init__(self, message: str, code: int | None = None):
    super().__init__(message)
    self.code = code


def is_transport_error(e: BaseException) -> bool:
  """Whether ``e`` comes from a bucket client's transport (gcsfs, aiohttp, google-auth, requests) rather than
  from this library: such an error is the bucket's or the network's, not a bug."""
  module = type(e).__module__ + "."
  return isinstance(e, Exception) and module.startswith(_TRANSPORT_MODULES)


def transport_reason(e: BaseException) -> str:
  """The first line of what a bucket client's error says, without gcsfs's ``", <code>"`` tail (its
  ``HttpError`` reads "<message>, <code>")."""
  text = (str(e).strip().splitlines() or [""])[0]
  code = getattr(e, "code", None)
  if isinstance(code, int) and text.endswith(f", {code}"):
    text = text[:-len(f", {code}")]
  return text[:200]


@contextlib.contextmanager
def _remote(path: str | os.PathLike) -> Iterator[None]:
  """Turns a bucket client's own error types into :class:`RemoteError` (an ``OSError`` naming ``path``); gcsfs's
  ``OSError`` subclasses (``FileNotFoundError``, ``FileExistsError`` for HTTP 412, ``Forbidden``) pass as they
  are."""
  try:
    yield
  except (OSError, ImportError):
    raise
  except Exception as e:  # noqa: BLE001  (gcsfs's HttpError, aiohttp's and google-auth's types)
    code = getattr(e, "code", None)
    reason = transport_reason(e)
    raise RemoteError(f"{REMOTE_PREFIX}{_key(path)}: {type(e).__name__}"
                      + (f" {code}" if isinstance(code, int) else "") + (f": {reason}" if reason else ""),
                      code if isinstance(code, int) else None) from e


def is_remote(path: str | os.PathLike | None) -> bool:
  """Whether ``path`` names a GCS object or prefix (``gs://bucket/...``, a string or an ``epath`` path)."""
  return path is not None and os.fspath(path).strip().startswith(REMOTE_PREFIX)


def _bucket_ok(name: str) -> bool:
  parts = name.split(".")
  return (3 <= len(name) <= (222 if len(parts) > 1 else 63) and all(_BUCKET_PART.fullmatch(p) for p in parts)
          and not name.startswith("goog") and not (len(parts) == 4 and all(p.isdigit() for p in parts)))


def remote_problem(path: str) -> str | None:
  """What a ``gs://`` URL must be to name a folder of a run, when ``path`` is not that (None when it is)."""
  rest = path.strip()[len(REMOTE_PREFIX):]
  bucket, _, key = rest.partition("/")
  if not _bucket_ok(bucket):
    return f"gs://<bucket>/<folder> whose bucket name has {_BUCKET_RULE} ({bucket!r} has not)"
  parts = [p for p in key.split("/") if p]
  if not parts:
    return "a folder inside the bucket (gs://bucket/folder), not the bucket itself"
  if any(p in (".", "..") for p in parts) or key.startswith("/") or "//" in key.rstrip("/"):
    return "a folder path without '.', '..' or empty segments"
  if not _KEY_CHARS.fullmatch(key):
    bad = sorted({c for c in key if not _KEY_CHARS.fullmatch(c)})
    return (f"a folder path of letters, digits and . _ ~ = + , @ - / only (it has {bad}: '?' and '#' would "
            "split the checkpoints' URL, '*' and '[' are globs)")
  if len(key.encode()) > MAX_FOLDER_BYTES:
    return (f"a folder path of at most {MAX_FOLDER_BYTES} characters (this one has {len(key.encode())}: GCS "
            "limits an object's name to 1024, and the run's files below it need the rest)")
  return None


def _fs() -> Any:
  """The ``gcsfs`` file system, without a listings cache (module docstring).

  Raises:
    ImportError: gcsfs is not installed (the message names the extra).
  """
  try:
    import fsspec
    import gcsfs  # noqa: F401  (registers the gs protocol's implementation)
  except ImportError as e:
    raise ImportError(f"a gs:// path needs gcsfs: {REMOTE_EXTRA}") from e
  fsspec.config.conf.setdefault("gs", {})["use_listings_cache"] = False  # also for epath's and orbax's instance
  return fsspec.filesystem("gs", use_listings_cache=False)


def _key(path: str | os.PathLike) -> str:
  """``bucket/key`` of a ``gs://`` path, without a trailing slash."""
  return os.fspath(path).strip()[len(REMOTE_PREFIX):].rstrip("/")


def as_path(path: str | os.PathLike) -> Any:
  """A path object for ``path``: ``pathlib.Path`` for a local one, ``etils.epath.Path`` for ``gs://``
  (both have ``/``, ``name``, ``parent``, ``exists``, ``glob``, ``read_text``)."""
  if is_remote(path):
    _fs()  # the gs defaults set before epath makes its own instance
    from etils import epath
    return epath.Path(REMOTE_PREFIX + _key(path))
  return pathlib.Path(path)


def join(base: str | os.PathLike, *names: str) -> str:
  """``base/name/...`` as a string (a URL stays one)."""
  if is_remote(base):
    return "/".join([REMOTE_PREFIX + _key(base), *names])
  return os.path.join(os.fspath(base), *names)


def absolute(path: str | os.PathLike) -> str:
  """The absolute form of a local path; a ``gs://`` URL without its trailing slash."""
  return REMOTE_PREFIX + _key(path) if is_remote(path) else os.path.abspath(os.fspath(path))


def exists(path: str | os.PathLike) -> bool:
  if is_remote(path):
    with _remote(path):
      return _fs().exists(_key(path))
  return os.path.exists(path)


def is_dir(path: str | os.PathLike) -> bool:
  """Whether ``path`` is a folder (on GCS: a prefix with objects below it)."""
  if is_remote(path):
    with _remote(path):
      return _fs().isdir(_key(path))
  return os.path.isdir(path)


def is_file(path: str | os.PathLike) -> bool:
  if is_remote(path):
    with _remote(path):
      return _fs().isfile(_key(path))
  return os.path.isfile(path)


def listdir(path: str | os.PathLike) -> list[str]:
  """The names in folder ``path`` (on GCS, ``[]`` for a prefix with nothing below it)."""
  if is_remote(path):
    try:
      with _remote(path):
        entries = _fs().ls(_key(path), detail=False)
    except FileNotFoundError:
      return []
    return sorted({e.rstrip("/").rsplit("/", 1)[-1] for e in entries if e.rstrip("/") != _key(path)})
  return os.listdir(path)


def makedirs(path: str | os.PathLike) -> None:
  """Makes folder ``path`` and its parents (nothing to make on GCS, whose folders are key prefixes)."""
  if not is_remote(path):
    os.makedirs(path, exist_ok=True)


def rmtree(path: str | os.PathLike) -> None:
  """Deletes folder ``path`` and everything in it; a missing one is not an error.

  Raises:
    OSError: something in it could not be deleted (permissions, a busy file).
  """
  with contextlib.suppress(FileNotFoundError):
    if is_remote(path):
      with _remote(path):
        _fs().rm(_key(path), recursive=True)
    else:
      shutil.rmtree(path)


def remove(path: str | os.PathLike) -> None:
  """Deletes file ``path``.

  Raises:
    FileNotFoundError: there is none.
  """
  if is_remote(path):
    with _remote(path):
      _fs().rm_file(_key(path))
    return
  os.unlink(path)


def move_tree(src: str | os.PathLike, dst: str | os.PathLike) -> None:
  """Moves folder ``src`` to ``dst`` (locally a rename; on GCS a copy of each object, then the deletes)."""
  if is_remote(src):
    with _remote(src):
      fs = _fs()
      fs.copy(_key(src), _key(dst), recursive=True)
      fs.rm(_key(src), recursive=True)
    return
  os.rename(src, dst)


def list_files(folder: str | os.PathLike) -> dict[str, tuple[int, str | None]]:
  """Every file under ``gs://`` folder ``folder``: ``{path relative to it: (size in bytes, base64 MD5 or None)}``
  (``{}`` when nothing is there)."""
  fs, base = _fs(), _key(folder)
  with _remote(folder):
    infos = fs.find(base, detail=True) if fs.exists(base) else {}
  return {key[len(base):].lstrip("/"): (int(info.get("size", -1)), info.get("md5Hash"))
          for key, info in infos.items() if info.get("type") == "file"}


def size(path: str | os.PathLike) -> int:
  """The size of file ``path`` in bytes (a local symlink's target's).

  Raises:
    FileNotFoundError: there is no such file.
  """
  if is_remote(path):
    with _remote(path):
      return int(_fs().info(_key(path))["size"])
  return os.stat(path).st_size


def mtime(path: str | os.PathLike) -> float | None:
  """When ``path`` was last written (seconds since the epoch; None when it does not exist). A local symlink's
  own time, not its target's."""
  if is_remote(path):
    try:
      with _remote(path):
        info = _fs().info(_key(path))
    except FileNotFoundError:
      return None
    updated = info.get("updated") or info.get("mtime")
    if updated is None:
      return None
    if isinstance(updated, str):
      import datetime
      updated = datetime.datetime.fromisoformat(updated.replace("Z", "+00:00"))
    return updated.timestamp()
  try:
    return os.lstat(path).st_mtime
  except FileNotFoundError:
    return None


def read_bytes(path: str | os.PathLike, limit: int | None = None) -> bytes:
  """The content of file ``path`` (its first ``limit + 1`` bytes at most when ``limit`` is given, so that a
  caller can tell a file longer than ``limit``).

  Raises:
    FileNotFoundError: there is no such file.
    IsADirectoryError: it is a folder.
  """
  if is_remote(path):
    with _remote(path):
      fs = _fs()
      key = _key(path)
      if limit is None:
        return fs.cat_file(key)
      return fs.cat_file(key, start=0, end=limit + 1)
  with open(path, "rb") as f:
    return f.read() if limit is None else f.read(limit + 1)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
  """Replaces file ``path`` with ``data`` atomically (module docstring).

  Raises:
    OSError: the folder is not writable, the disk is full, ... (the target is left unchanged and no
      temporary file remains).
  """
  if is_remote(path):
    with _remote(path):
      _fs().pipe_file(_key(path), data)
    return
  path = pathlib.Path(path)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.unlink(tmp)
    raise


def create_new(path: str | os.PathLike, data: bytes) -> None:
  """Creates file ``path`` holding ``data`` only if no file is there (module docstring).

  Raises:
    FileExistsError: ``path`` exists (another writer created it first).
    OSError: anything else (on GCS a :class:`RemoteError`: the server, the network).
  """
  if is_remote(path):
    try:
      with _remote(path):
        _fs().pipe_file(_key(path), data, mode="create")
    except FileExistsError:  # gcsfs's for the failed precondition (HTTP 412), naming the upload URL
      raise FileExistsError(os.fspath(path)) from None
    except RemoteError as e:
      if e.code == 412:
        raise FileExistsError(os.fspath(path)) from None
      raise
    return
  fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
  try:
    os.write(fd, data)
  finally:
    os.close(fd)


def probe_write(folder: str | os.PathLike) -> None:
  """Writes and deletes an empty object in ``gs://`` folder ``folder``, so that a bucket that is missing,
  unwritable with this machine's credentials or unreachable is found before any work.

  Raises:
    OSError: naming the bucket and what the server or the network answered.
  """
  bucket = _key(folder).split("/", 1)[0]
  probe = join(folder, f".write_probe-{os.getpid()}-{time.time_ns()}")
  quiet = logging.getLogger("gcsfs")  # its retries log a traceback each; the error below is the one line
  level = quiet.level
  quiet.setLevel(logging.CRITICAL + 1)
  try:
    write_bytes(probe, b"")
    remove(probe)
  except FileNotFoundError:
    raise OSError(f"bucket {bucket!r} does not exist or is not visible with this machine's credentials") from None
  except Exception as e:  # noqa: BLE001  (gcsfs, aiohttp and google-auth raise many types)
    reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    raise OSError(f"bucket {bucket!r} cannot be written from here ({type(e).__name__}: {reason})") from None
  finally:
    quiet.setLevel(level)


def append_bytes(path: str | os.PathLike, data: bytes) -> None:
  """Appends ``data`` to file ``path`` (made if missing), durably (module docstring).

  Raises:
    OSError: the file cannot be written (on GCS also: :data:`_APPEND_TRIES` conflicting writers in a row).
  """
  if is_remote(path):
    with _remote(path):
      _append_remote(_fs(), _key(path), data)
    return
  with open(path, "ab") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())


def _append_remote(fs: Any, key: str, data: bytes) -> None:
  """Reads object ``key`` and its generation, and writes it back with ``data`` appended on the condition that
  the generation is unchanged (0: still absent); a conflict (HTTP 412, another writer in between) reads again."""
  from gcsfs.core import quote

  bucket, name = key.split("/", 1)
  for attempt in range(_APPEND_TRIES):
    try:
      headers, old = fs.call("GET", fs.url(key))
      generation = headers.get("x-goog-generation") or str(fs.info(key).get("generation", ""))
    except FileNotFoundError:
      old, generation = b"", "0"
    if not generation:
      raise RemoteError(f"{REMOTE_PREFIX}{key}: the server names no generation for the object, so it cannot be "
                        "appended to safely")
    try:
      fs.call("POST", f"{fs._location}/upload/storage/v1/b/{quote(bucket)}/o", uploadType="media", name=name,
              ifGenerationMatch=generation, data=old + data, headers={"Content-Type": "application/octet-stream"})
      return
    except FileExistsError:  # HTTP 412: written by another writer since the read
      time.sleep(min(0.05 * 2 ** attempt, 2.0))
  raise RemoteError(f"{REMOTE_PREFIX}{key}: {_APPEND_TRIES} appends in a row met another writer's; not appended",
                    412)


__all__ = ["MAX_FOLDER_BYTES", "REMOTE_EXTRA", "REMOTE_PREFIX", "RemoteError", "absolute", "append_bytes", "as_path",
           "create_new", "exists", "is_dir", "is_file", "is_remote", "is_transport_error", "join", "list_files",
           "listdir", "makedirs", "move_tree", "mtime", "probe_write", "read_bytes", "remote_problem", "remove",
           "rmtree", "size", "transport_reason", "write_bytes"]
