"""The one boundary between a checkpoint folder from the internet and everything that reads it.

A Hugging Face checkpoint folder is data a stranger wrote. Every file of it that the library reads
(``config.json``, the shard index and shards, the tokenizer files, the chat template) and every file
the export copies out of it is reached through this module, which promises:

* **regular files only**: a FIFO (which would block the reader forever), a character device
  (``/dev/zero``: endless bytes), a socket or a directory where a file is expected is refused;
* **nothing outside the folder**: a name is a plain file name (no ``/``, ``..``, NUL), and a symlink
  is followed only when its final target lies inside the folder, or, for a snapshot of the Hugging
  Face hub cache (``.../models--<org>--<name>/snapshots/<revision>/``, whose files are links to
  ``../../blobs/<hash>``), inside that repository's ``blobs/`` (:func:`allowed_roots`);
* **checked where it is read**: a file is opened by :func:`open_member`, which checks the open
  descriptor itself (a regular file, which the kernel places inside the folder), so that an entry
  swapped between the check and the open is refused rather than read;
* **bounded reads**: the size is checked on the open descriptor (``fstat``) before a byte is read, and
  no more than the limit is ever read, whatever the file claims;
* **bounded JSON**: strict (no NaN, no duplicate keys), of the expected top-level type, and at most
  :data:`MAX_JSON_DEPTH` levels deep (a 100,000-deep array is refused, never a ``RecursionError``).

Every refusal is a :class:`~daca_jax.errors.DataError` of one line naming the file, what it is and
what is allowed; the command-line tools print it as ``error: <line>`` with exit status 2
(:mod:`daca_jax.run.cli_errors`).
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import stat
from typing import Any, BinaryIO

from daca_jax.errors import DataError
from daca_jax.models.safetensors_file import strict_json

# A real config.json is ~2 kB, an index ~30 kB, tokenizer_config.json (with a chat template) ~10 kB.
MAX_JSON_BYTES = 10_000_000
# LLaDA's tokenizer.json is ~10 MB, Qwen2's vocab.json 3.4 MB and merges.txt 1.7 MB.
MAX_TOKENIZER_BYTES = 100_000_000
# A released chat template is a few kB.
MAX_TEMPLATE_BYTES = 1_000_000
# Released configs nest 3 levels (tokenizer_config.json's added_tokens_decoder); an index 2.
MAX_JSON_DEPTH = 32
# A file name's limit on Linux, macOS and Windows file systems (NAME_MAX).
MAX_NAME_BYTES = 255


def _kind(mode: int) -> str:
  """What a non-regular file is, in words."""
  for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                     (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                     (stat.S_ISSOCK, "a socket")):
    if test(mode):
      return name
  return "not a regular file"


def inside(path: pathlib.Path, folder: pathlib.Path) -> bool:
  """Whether resolved ``path`` is ``folder`` or lies under it (both resolved)."""
  return path == folder or folder in path.parents


def allowed_roots(folder: pathlib.Path) -> tuple[pathlib.Path, ...]:
  """Where the targets of ``folder``'s symlinks may lie: the folder itself, and for a hub cache
  snapshot (``models--*/snapshots/<revision>``) the repository's ``blobs/`` as well."""
  if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
    return folder, folder.parent.parent / "blobs"
  return (folder,)


def _within(path: pathlib.Path, folder: pathlib.Path) -> bool:
  return any(inside(path, r) for r in allowed_roots(folder))


def root(path: str | os.PathLike) -> pathlib.Path:
  """The checkpoint folder ``path``, resolved (``~`` expanded, symlinks followed once).

  Raises:
    DataError: ``path`` is not a directory.
  """
  folder = pathlib.Path(path).expanduser()
  if not folder.is_dir():
    raise DataError(f"{path}: not a directory (expected a LLaDA or Dream Hugging Face checkpoint folder)")
  return folder.resolve()


def check_name(folder: pathlib.Path, name: Any, where: str) -> str:
  """``name`` if it is a plain file name inside ``folder`` (what an index may name).

  Raises:
    DataError: naming ``where`` (the file and field that gave the name), for a name that is not a
      non-empty string, is ``.`` / ``..``, holds a path separator, NUL or another non-printable
      character (a newline or a terminal escape would reach the one-line error messages and the
      terminal that prints them), or is longer than a file name may be (:data:`MAX_NAME_BYTES`).
  """
  if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name
      or not name.isprintable() or len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES):
    raise DataError(f"{where}: {name!r:.100} is not allowed: expected a plain file name inside {folder} "
                    f"(printable, at most {MAX_NAME_BYTES} bytes)")
  return name


def member(folder: pathlib.Path, name: str, *, where: str = "") -> pathlib.Path | None:
  """The regular file ``folder/name`` (its resolved path), or None when there is no such entry.

  Args:
    folder: from :func:`root`.
    name: a plain file name (checked, :func:`check_name`).
    where: who named the file, for the message (default: the file itself).
  Raises:
    DataError: the name is not plain; the entry is a symlink whose target lies outside ``folder`` (or
      is dangling, or loops); the target is not a regular file (FIFO, device, socket, directory).
  """
  check_name(folder, name, where or str(folder))
  path = folder / name
  if not os.path.lexists(path):
    return None
  try:
    real = path.resolve(strict=True)
  except (OSError, RuntimeError):  # dangling link, a loop
    raise DataError(f"{path}: a symlink to {os.readlink(path)!r:.200} that does not resolve; expected a "
                    "regular file inside the checkpoint folder") from None
  if not _within(real, folder):
    raise DataError(f"{path}: a symlink to {str(real)!r:.200}, outside the checkpoint folder {folder}; "
                    "expected a regular file inside it")
  mode = real.stat().st_mode
  if not stat.S_ISREG(mode):
    raise DataError(f"{path}: {_kind(mode)}; expected a regular file")
  return real


def has(folder: pathlib.Path, name: str) -> bool:
  """Whether ``folder`` has an entry ``name`` (of any kind: :func:`member` then checks it)."""
  return os.path.lexists(folder / name)


def require(folder: pathlib.Path, name: str, what: str) -> pathlib.Path:
  """:func:`member` that must exist.

  Raises:
    DataError: see :func:`member`; or no such file (naming ``what`` it should hold).
  """
  path = member(folder, name)
  if path is None:
    raise DataError(f"{folder}: no {name} ({what}); expected a LLaDA or Dream Hugging Face checkpoint "
                    "folder (config.json, model.safetensors[.index.json], tokenizer files)")
  return path


def _opened_path(fd: int) -> pathlib.Path | None:
  """The path of the file open on ``fd`` as the kernel knows it (Linux ``/proc/self/fd``), or None
  where the platform does not say."""
  try:
    return pathlib.Path(os.readlink(f"/proc/self/fd/{fd}"))
  except OSError:
    return None


def open_member(folder: pathlib.Path, name: str, *, where: str = "") -> BinaryIO:
  """Regular file ``folder/name`` opened for binary reading, checked on its open descriptor.

  :func:`member` checks a path; between that check and an ``open`` the entry (or a link it resolves
  through) could be swapped for a FIFO, a device or a link out of the folder. So the resolved path is
  opened without following a final symlink and without blocking (a FIFO swapped in cannot block the
  open), and the descriptor itself is checked: a regular file, which the kernel places inside the
  folder (or a hub snapshot's ``blobs/``). What is read is then what was checked.

  Raises:
    DataError: see :func:`require`; the entry changed between the check and the open (now a symlink,
      not a regular file, or outside the folder).
  """
  path = require(folder, name, "a file the library reads")
  shown = folder / name
  try:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
  except OSError as e:  # ELOOP: a symlink swapped in after the check; ENOENT: removed
    raise DataError(f"{shown}: changed while being opened ({e.strerror}); expected a regular file inside the "
                    f"checkpoint folder{' named by ' + where if where else ''}") from None
  f = os.fdopen(fd, "rb")
  try:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
      raise DataError(f"{shown}: {_kind(st.st_mode)}; expected a regular file")
    opened = _opened_path(fd)
    if opened is not None and opened.is_absolute() and not _within(opened, folder):
      raise DataError(f"{shown}: opens {str(opened)!r:.200}, outside the checkpoint folder {folder} (changed "
                      "since it was checked); expected a regular file inside it")
    os.set_blocking(fd, True)
  except BaseException:
    f.close()
    raise
  return f


def read_bytes(folder: pathlib.Path, name: str, max_bytes: int) -> bytes:
  """The bytes of regular file ``folder/name``, at most ``max_bytes`` of them.

  The file is opened by :func:`open_member` (checked on its descriptor), so what is read is what was
  checked.

  Raises:
    DataError: see :func:`open_member`; a file larger than ``max_bytes``.
  """
  with open_member(folder, name) as f:
    st = os.fstat(f.fileno())
    if st.st_size > max_bytes:
      raise DataError(f"{folder / name}: {st.st_size} bytes, more than the {max_bytes} a {name} may have")
    data = f.read(max_bytes + 1)
  if len(data) > max_bytes:  # grew since the check
    raise DataError(f"{folder / name}: more than the {max_bytes} bytes a {name} may have")
  return data


def read_text(folder: pathlib.Path, name: str, max_bytes: int) -> str:
  """:func:`read_bytes` as UTF-8 text.

  Raises:
    DataError: see :func:`read_bytes`; not UTF-8.
  """
  data = read_bytes(folder, name, max_bytes)
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise DataError(f"{folder / name}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def json_depth(value: Any) -> int:
  """Nesting depth of a parsed JSON value (a scalar is 0), without recursion."""
  deepest, stack = 0, [(value, 0)]
  while stack:
    node, depth = stack.pop()
    if isinstance(node, dict):
      node = list(node.values())
    if isinstance(node, list):
      deepest = max(deepest, depth + 1)
      stack.extend((child, depth + 1) for child in node if isinstance(child, (dict, list)))
  return deepest


def read_json(folder: pathlib.Path, name: str, *, kind: type = dict,
              max_bytes: int = MAX_JSON_BYTES) -> Any:
  """Strict, bounded JSON from ``folder/name``.

  Raises:
    DataError: see :func:`read_text`; not strict JSON (NaN, duplicate keys); nested deeper than
      :data:`MAX_JSON_DEPTH`; a top-level value other than ``kind``.
  """
  value = strict_json(read_text(folder, name, max_bytes), str(folder / name))
  if json_depth(value) > MAX_JSON_DEPTH:
    raise DataError(f"{folder / name}: JSON nested more than {MAX_JSON_DEPTH} levels deep")
  if not isinstance(value, kind):
    raise DataError(f"{folder / name}: a JSON {type(value).__name__}, expected "
                    f"{'an object' if kind is dict else 'a JSON ' + kind.__name__}")
  return value


# The largest token id a tokenizer may hold: the library allocates a table of 1 + its largest id
# (LLaDA-8B has 126464 embedding rows, Qwen2 / Dream 152064).
MAX_TOKEN_ID = 2**24


def check_token_ids(ids: Any, where: str) -> int:
  """``1 +`` the largest of ``ids`` (0 when there are none), each an integer in
  ``[0, MAX_TOKEN_ID)``.

  Raises:
    DataError: naming ``where``, for an id that is not such an integer.
  """
  top = -1
  for i in ids:
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < MAX_TOKEN_ID:
      shown = i if not isinstance(i, int) or abs(i) < 10**30 else "a huge integer"
      raise DataError(f"{where}: token id {shown!r:.60} is not allowed: expected an integer in "
                      f"[0, {MAX_TOKEN_ID})")
    top = max(top, i)
  return top + 1


def read_tokenizer(folder: pathlib.Path, name: str = "tokenizer.json") -> Any:
  """A ``tokenizers.Tokenizer`` from ``folder/name``, read through this boundary (a regular file inside
  the folder of at most :data:`MAX_TOKENIZER_BYTES`, parsed from memory) with every id of its
  vocabulary in ``[0, MAX_TOKEN_ID)``.

  Raises:
    DataError: see :func:`read_text`; a file the ``tokenizers`` library cannot parse; an id out of range.
  """
  from tokenizers import Tokenizer

  text = read_text(folder, name, MAX_TOKENIZER_BYTES)
  try:
    tok = Tokenizer.from_str(text)
  except Exception as e:  # the Rust parser raises a bare Exception for malformed files
    raise DataError(f"{folder / name}: not a tokenizer the 'tokenizers' library can read "
                    f"({' '.join(str(e).split())[:200]})") from None
  check_token_ids(tok.get_vocab(with_added_tokens=True).values(), str(folder / name))
  return tok


@dataclasses.dataclass(frozen=True)
class Entry:
  """A top-level entry of a checkpoint folder, classified.

  Attributes:
    name: its name in the folder.
    kind: "file" (a regular file, or a symlink to one inside the folder), "dir" (a sub-folder inside),
      "outside" (a symlink whose target lies outside the folder, dangles or loops), "special" (a FIFO,
      device or socket, or a link to one), "hidden" (a name starting with ``.``).
    path: the resolved target for "file" and "dir"; the entry itself otherwise.
    why: for "outside" and "special", what it is (for the message).
  """

  name: str
  kind: str
  path: pathlib.Path
  why: str = ""


def entries(folder: pathlib.Path) -> list[Entry]:
  """Every top-level entry of ``folder`` (from :func:`root`), sorted by name and classified; nothing
  is opened or read."""
  out = []
  for p in sorted(folder.iterdir()):
    if p.name.startswith("."):
      out.append(Entry(p.name, "hidden", p))
      continue
    try:
      real = p.resolve(strict=True)
    except (OSError, RuntimeError):
      out.append(Entry(p.name, "outside", p, "a symlink that does not resolve"))
      continue
    if not _within(real, folder):
      out.append(Entry(p.name, "outside", p, f"a symlink to {real}, outside the folder"))
      continue
    mode = real.stat().st_mode
    if stat.S_ISREG(mode):
      out.append(Entry(p.name, "file", real))
    elif stat.S_ISDIR(mode):
      out.append(Entry(p.name, "dir", real))
    else:
      out.append(Entry(p.name, "special", p, _kind(mode)))
  return out


__all__ = ["Entry", "MAX_JSON_BYTES", "MAX_JSON_DEPTH", "MAX_NAME_BYTES", "MAX_TEMPLATE_BYTES", "MAX_TOKEN_ID",
           "MAX_TOKENIZER_BYTES", "check_name", "check_token_ids", "entries", "has", "inside", "json_depth", "member", "open_member",
           "read_bytes", "read_json",
           "read_text", "read_tokenizer", "require", "root"]
