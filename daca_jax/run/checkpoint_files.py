"""What orbax leaves on disk, and its errors: finished vs interrupted saves, and the OS error behind a failure.

A finished orbax checkpoint directory holds ``commit_success.txt``; an interrupted save leaves a
``*.orbax-checkpoint-tmp*`` directory or a step directory without it (:func:`remove_unfinished`). Orbax
and TensorStore report an OS failure (disk full, read-only) wrapped in their own exceptions:
:func:`orbax_errors` raises the OSError instead. Nothing here imports orbax;
:mod:`daca_jax.run.checkpoint` uses it.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from typing import Any, Iterator

from daca_jax import storage

# Orbax writes this file into a step directory right before the atomic rename.
COMMIT_FILE = "commit_success.txt"
# Orbax's temporary directories: ``<name>.orbax-checkpoint-tmp`` (optionally ``-<timestamp>``).
TMP_MARKER = ".orbax-checkpoint-tmp"
STEP_DIR_RE = re.compile(r"^(0|[1-9]\d*)$")

_log = logging.getLogger("daca_jax.run.checkpoint")  # the name the checkpoint's warnings always had


def short_error(e: BaseException) -> str:
  """First line of an orbax/TensorStore error, without the multi-line TensorStore spec."""
  text = (str(e).strip().splitlines() or [type(e).__name__])[0]
  return text.split(" See full TensorStore details")[0][:300]


def os_error(e: BaseException, directory: str) -> OSError | None:
  """The OSError behind an orbax/TensorStore failure (they report e.g. a full disk as
  ``ValueError: RESOURCE_EXHAUSTED: Failed writing: "<path>": ... [os_error_code='28']``)."""
  for err in (e, e.__cause__, e.__context__):
    if isinstance(err, OSError):
      return err
    found = re.search(r"os_error_code='?(\d+)", str(err or ""))
    if found:
      code = int(found.group(1))
      # The file is the quoted absolute path (TensorStore also quotes keys inside its database).
      path = re.search(r'(?:Failed (?:writing|reading)|[Ff]ile)[^"]*"(/[^"]+)"', str(err)) \
          or re.search(r'"(/[^"]+)"', str(err))
      return OSError(code, os.strerror(code), path.group(1) if path else directory)
  return None


@contextlib.contextmanager
def orbax_errors(directory: str) -> Iterator[None]:
  """Re-raises an orbax failure that comes from the OS (disk full, read-only, ...) as that OSError,
  without orbax's chain of tracebacks."""
  try:
    yield
  except Exception as e:  # orbax / TensorStore wrap OS errors in ValueError or Exception
    os_err = os_error(e, directory)
    if os_err is None:
      raise
    raise os_err from None


def is_committed(path: str) -> bool:
  """Whether ``path`` is a finished orbax checkpoint directory."""
  return storage.is_file(storage.join(path, COMMIT_FILE))


def check_json(metadata: dict[str, Any]) -> None:
  """Raises TypeError now (not later in orbax's background thread) if ``metadata`` isn't JSON."""
  if not isinstance(metadata, dict):
    raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}")
  try:
    json.dumps(metadata)
  except (TypeError, ValueError) as e:
    raise TypeError(f"metadata is not JSON-serialisable: {e}") from e


def remove_unfinished(directory: str) -> list[str]:
  """Deletes interrupted saves in ``directory``; returns the names removed.

  Removed: orbax temporary directories (``*.orbax-checkpoint-tmp*``) and step directories
  (decimal names) without ``commit_success.txt``.
  """
  removed = []
  for name in sorted(storage.listdir(directory)):
    path = storage.join(directory, name)
    if not storage.is_dir(path):
      continue
    if TMP_MARKER in name or (STEP_DIR_RE.match(name) and not is_committed(path)):
      with contextlib.suppress(OSError):  # best effort: what stays is never listed as a step
        storage.rmtree(path)
      removed.append(name)
  if removed:
    _log.warning("Removed unfinished checkpoint directories in %s: %s", directory, removed)
  return removed
