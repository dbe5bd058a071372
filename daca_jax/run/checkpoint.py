"""Atomic checkpoints of training state (the only module that imports orbax).

A checkpoint directory holds one sub-directory per saved step (``<dir>/<step>/``), each with two
items: ``state`` (any pytree of arrays and Python scalars, written with orbax's standard pytree
handler) and ``metadata`` (a JSON dict: config, data-iterator position, ...).

Atomicity: orbax writes every step into ``<dir>/<step>.orbax-checkpoint-tmp*`` and renames it to
``<dir>/<step>`` only once everything (including ``commit_success.txt``) is on disk. On top of that,
:class:`Checkpointer` only reports a step whose directory holds ``commit_success.txt``, and when it
opens a directory it deletes leftovers of interrupted saves (orbax tmp directories and step
directories without the commit file), so a half-written checkpoint is never listed or restored and
never counts against ``max_to_keep``.

Integrity: every save stores a checksum of the state's values (:func:`daca_jax.run.checksum.tree_checksum`,
computed on device; one per top-level entry of a dict state, e.g. ``params`` and ``opt_state``) in
the metadata item, and :meth:`Checkpointer.restore` recomputes it on the restored state: a
checkpoint whose bytes changed on disk (a flipped bit that the storage layer reads back without
complaint, a NaN written into Adam's moments) raises :class:`CorruptCheckpointError` instead of
being restored silently. A reader of one entry alone (``experiments/evaluate.py`` reads ``params``)
verifies it with :func:`verify_entry`. Checkpoints written before the checksum existed are
restored unverified.

Typical use::

  ckpt = Checkpointer(workdir / "checkpoints", max_to_keep=3)
  if ckpt.latest_step() is not None:
    state, meta = ckpt.restore(None, target=state)
  ...
  ckpt.save(step, state, metadata={"config": cfg.to_dict(), "data_pos": pos})
  ...
  ckpt.close()  # waits for the last asynchronous save
It stays one module over 350 lines on purpose: it is the only module that imports orbax, so every orbax call
(the :class:`Checkpointer`'s steps and the one-off pytrees) is here. Checksums are in
:mod:`daca_jax.run.checkpoint_integrity`, the on-disk layout and orbax's errors in
:mod:`daca_jax.run.checkpoint_files`.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
from typing import Any, Mapping

import jax
import numpy as np
import orbax.checkpoint as ocp

from daca_jax import storage
from daca_jax.run import checkpoint_noise
from daca_jax.run.checkpoint_files import (TMP_MARKER, check_json, is_committed, orbax_errors, remove_unfinished,
                                           short_error)
from daca_jax.run.checkpoint_integrity import INTEGRITY_KEY, CorruptCheckpointError, entries, integrity, layout, verify
from daca_jax.parallel.distributed import sync_processes

__all__ = ["Checkpointer", "CorruptCheckpointError", "load_entry", "load_pytree", "pytree_exists", "save_pytree",
           "verify_entry"]

PyTree = Any

_log = logging.getLogger(__name__)

checkpoint_noise.install()  # orbax's INFO chatter and teardown tracebacks stay off the console


class Checkpointer:
  """Keeps the last ``max_to_keep`` checkpoints of a training run in one directory.

  Args:
    directory: where checkpoints live; created (with parents) if missing. Leftovers of
      interrupted saves in it are deleted.
    max_to_keep: number of checkpoints kept; after each save, all but the ``max_to_keep`` most
      recently *saved* ones are deleted (orbax's policy: saving a step below the latest one
      keeps it and drops an older-saved one). ``None`` keeps all.
    async_save: if True (default), :meth:`save` returns once the arrays are copied to host memory
      and the files are written in a background thread; call :meth:`wait` (or :meth:`close`)
      before relying on them being on disk. If False every save is fully synchronous.

  Raises:
    ValueError: ``max_to_keep`` < 1.
  """

  def __init__(
      self,
      directory: str | os.PathLike,
      max_to_keep: int | None = 3,
      *,
      async_save: bool = True,
  ):
    if max_to_keep is not None and max_to_keep < 1:
      raise ValueError(f"max_to_keep must be >= 1 or None, got {max_to_keep}")
    self.directory = storage.absolute(directory)
    storage.makedirs(self.directory)
    if jax.process_index() == 0:  # multi-host: one process tidies the shared directory
      remove_unfinished(self.directory)
    sync_processes("checkpointer_open")
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep,
        create=True,
        enable_async_checkpointing=async_save,
    )
    self._mgr = ocp.CheckpointManager(
        self.directory, item_names=("state", "metadata"), options=options
    )
    self._closed = False

  # --- queries -------------------------------------------------------------------------------

  def _step_path(self, step: int) -> str:
    return storage.join(self.directory, str(step))

  def all_steps(self) -> list[int]:
    """Steps of all finished checkpoints, ascending (waits for pending async saves first)."""
    self.wait()
    with orbax_errors(self.directory):
      steps = self._mgr.all_steps()
    return sorted(int(s) for s in steps if is_committed(self._step_path(s)))

  def latest_step(self) -> int | None:
    """The largest finished step, or None if there is no checkpoint."""
    steps = self.all_steps()
    return steps[-1] if steps else None

  # --- save / restore ------------------------------------------------------------------------

  def save(
      self,
      step: int,
      state: PyTree,
      metadata: dict[str, Any] | None = None,
      *,
      force: bool = False,
  ) -> bool:
    """Saves ``state`` and ``metadata`` as checkpoint ``step``.

    Args:
      step: non-negative int (Python or numpy/JAX integer scalar).
      state: pytree of jax/numpy arrays (any dtype, including bfloat16 and PRNG keys, raw uint32
        or typed) and Python scalars; ``flax.nnx.State`` and optax states are fine. Arrays
        are copied to host memory before this returns, so they may then be donated (jax) or
        modified in place (numpy) even while an asynchronous save is still writing.
      metadata: JSON-serialisable dict (``None`` -> ``{}``). Note JSON turns tuples into lists
        and non-string keys into strings.
      force: if ``step`` already has a finished checkpoint, replace it. Without ``force`` such a
        save is skipped with a warning (e.g. a final save at a step the loop already saved).

    Returns:
      True if a checkpoint was written, False if skipped.

    Raises:
      ValueError: negative step; RuntimeError: the checkpointer is closed or orbax refused the
      save; TypeError: ``metadata`` is not a JSON-serialisable dict.
    """
    if self._closed:
      raise RuntimeError(f"Checkpointer for {self.directory} is closed")
    step = int(step)
    if step < 0:
      raise ValueError(f"step must be >= 0, got {step}")
    metadata = {} if metadata is None else metadata
    check_json(metadata)
    metadata = {**metadata, INTEGRITY_KEY: integrity(state)}
    self.wait()  # a save of this very step may still be in flight
    latest = self.latest_step()
    if latest is not None and step < latest:
      _log.warning(
          "Saving step %d below the latest step %d in %s; latest_step() still returns %d",
          step, latest, self.directory, latest,
      )
    path = self._step_path(step)
    if is_committed(path):
      if not force:
        _log.warning("Checkpoint %d already exists in %s; not saved again", step, self.directory)
        return False
      with orbax_errors(self.directory):
        self._mgr.delete(step)
    if jax.process_index() == 0 and storage.exists(path):  # unfinished: orbax would refuse it
      storage.rmtree(path)
    sync_processes("checkpoint_save_tidy")  # no process starts writing before the tidy-up ends
    # ``force=True`` bypasses orbax's save-interval policy, which silently skips any step
    # <= the latest one; we decide above whether a step is to be saved.
    with orbax_errors(self.directory):
      saved = self._mgr.save(
          step,
          args=ocp.args.Composite(
              state=ocp.args.StandardSave(state),
              metadata=ocp.args.JsonSave(metadata),
          ),
          force=True,
      )
    if not saved:
      raise RuntimeError(f"orbax did not save step {step} in {self.directory}")
    return True

  def restore(self, step: int | None, target: PyTree) -> tuple[PyTree, dict[str, Any]]:
    """Restores checkpoint ``step`` (None -> the latest) into the structure of ``target``.

    Args:
      step: step to restore, or None for the latest finished one.
      target: pytree with the saved structure; leaves are concrete arrays / Python scalars or
        ``jax.ShapeDtypeStruct`` (e.g. from ``jax.eval_shape``). Arrays come back as the leaf
        kind of the target (jax array for jax arrays and ShapeDtypeStructs, numpy for numpy,
        Python scalars for Python scalars), with the target's dtypes and shardings. Container
        types (``nnx.State``, optax NamedTuples, dicts) are those of ``target``.

    Returns:
      ``(state, metadata)``.

    Raises:
      FileNotFoundError: no checkpoint in the directory, or no finished checkpoint ``step``; the
        message names the directory and the available steps.
      ValueError: ``target``'s tree structure does not match the checkpoint.
      CorruptCheckpointError: (a ValueError) the checkpoint's files cannot be read or decoded, or
        the restored values differ from those saved (damaged on disk); one line, naming the step.
      OSError: the OS refused the read (e.g. permissions).
    """
    self.wait()
    steps = self.all_steps()
    if step is None:
      if not steps:
        raise FileNotFoundError(f"No checkpoint found in {self.directory}")
      step = steps[-1]
    step = int(step)
    if step not in steps:
      raise FileNotFoundError(
          f"No checkpoint for step {step} in {self.directory}; available steps: {steps}"
      )
    try:
      with orbax_errors(self._step_path(step)):
        restored = self._mgr.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(target),
                metadata=ocp.args.JsonRestore(),
            ),
        )
    except OSError:
      raise
    except json.JSONDecodeError as e:
      raise CorruptCheckpointError(f"checkpoint {self._step_path(step)} cannot be read: "
                                   f"damaged JSON ({e.msg})") from None
    except (KeyError, ValueError, TypeError) as e:
      raise ValueError(
          f"Checkpoint {step} in {self.directory} does not match the target structure: {short_error(e)}"
      ) from None
    except Exception as e:  # TensorStore reports unreadable array files as a plain Exception
      raise CorruptCheckpointError(f"checkpoint {self._step_path(step)} cannot be read: {short_error(e)}") from None
    metadata = {} if restored.metadata is None else dict(restored.metadata)
    stored = metadata.pop(INTEGRITY_KEY, None)
    if isinstance(stored, Mapping):
      verify(self._step_path(step), stored, entries(restored.state))
    return restored.state, metadata

  # --- lifecycle -----------------------------------------------------------------------------

  def wait(self) -> None:
    """Blocks until every pending asynchronous save is on disk."""
    if not self._closed:
      with orbax_errors(self.directory):
        self._mgr.wait_until_finished()

  def close(self) -> None:
    """Waits for pending saves and releases orbax's resources (idempotent).

    Raises:
      OSError: a pending save failed for a reason of the OS (e.g. the disk is full); the
        checkpointer is closed all the same.
    """
    if not self._closed:
      self._closed = True
      with orbax_errors(self.directory):  # close() can re-raise a failed save: wrapped too
        try:
          self._mgr.wait_until_finished()
        finally:
          self._mgr.close()

  def __enter__(self) -> Checkpointer:
    return self

  def __exit__(self, *exc_info: Any) -> None:
    self.close()

  def __repr__(self) -> str:
    return f"Checkpointer({self.directory!r}, steps={self.all_steps()})"


# --- one-off pytrees ---------------------------------------------------------------------------


def pytree_exists(path: str | os.PathLike) -> bool:
  """Whether ``path`` holds a finished :func:`save_pytree` checkpoint."""
  return is_committed(storage.absolute(path))


def save_pytree(path: str | os.PathLike, state: PyTree, *, force: bool = False) -> None:
  """Saves one pytree into directory ``path`` atomically and synchronously.

  Orbax writes to ``<path>.orbax-checkpoint-tmp*`` and renames it to ``path`` when done, so
  ``path`` either holds the whole pytree or does not exist. Leftovers of an interrupted earlier
  save are removed first.

  Args:
    path: destination directory (parents are created).
    state: pytree as for :meth:`Checkpointer.save`.
    force: replace an existing finished checkpoint at ``path``.

  Raises:
    FileExistsError: ``path`` holds a finished checkpoint and ``force`` is False, or ``path``
      exists and is not a directory.
  """
  path = storage.absolute(path)
  parent, base = os.path.split(path)  # also for gs://bucket/a/b
  storage.makedirs(parent)
  for name in storage.listdir(parent):
    if name.startswith(base + TMP_MARKER):
      with contextlib.suppress(OSError):  # a leftover of an interrupted save: best effort
        storage.rmtree(storage.join(parent, name))
  if storage.is_file(path):
    raise FileExistsError(f"{path} exists and is not a directory")
  if storage.exists(path):
    if is_committed(path) and not force:
      raise FileExistsError(f"A checkpoint already exists at {path} (use force=True to replace)")
    storage.rmtree(path)
  checkpointer = ocp.Checkpointer(ocp.StandardCheckpointHandler())
  try:
    with orbax_errors(path):
      checkpointer.save(path, args=ocp.args.StandardSave(state))
  finally:
    checkpointer.close()


def load_pytree(path: str | os.PathLike, target: PyTree) -> PyTree:
  """Restores a pytree saved by :func:`save_pytree` into the structure of ``target``.

  Args:
    path: directory written by :func:`save_pytree`.
    target: as for :meth:`Checkpointer.restore`.

  Returns:
    The restored pytree.

  Raises:
    FileNotFoundError: ``path`` holds no finished checkpoint (missing or interrupted save).
    ValueError: ``target``'s tree structure does not match the checkpoint.
    CorruptCheckpointError: the checkpoint's files cannot be read or decoded (one line).
    OSError: the OS refused the read.
  """
  path = storage.absolute(path)
  if not is_committed(path):
    raise FileNotFoundError(f"No finished checkpoint at {path}")
  checkpointer = ocp.Checkpointer(ocp.StandardCheckpointHandler())
  try:
    with orbax_errors(path):
      return checkpointer.restore(path, args=ocp.args.StandardRestore(target))
  except OSError:
    raise
  except json.JSONDecodeError as e:
    raise CorruptCheckpointError(f"checkpoint {path} cannot be read: damaged JSON ({e.msg})") from None
  except (KeyError, ValueError, TypeError) as e:
    raise ValueError(f"Checkpoint at {path} does not match the target structure: {short_error(e)}") from None
  except Exception as e:  # TensorStore reports unreadable array files as a plain Exception
    raise CorruptCheckpointError(f"checkpoint {path} cannot be read: {short_error(e)}") from None
  finally:
    checkpointer.close()


def load_entry(path: str | os.PathLike, key: str) -> PyTree:
  """Restores one top-level entry of a saved dict state (e.g. ``params`` of ``<step>/state``) as host
  numpy arrays in the structure it was saved with, without reading the other entries (an exporter of
  an 8B run reads the parameters, not twice their size of Adam moments).

  An ``nnx.State`` comes back as nested dicts whose leaves are ``{"value": array}``.

  Raises:
    FileNotFoundError: ``path`` holds no finished checkpoint.
    KeyError: the saved state has no entry ``key`` (the message lists those it has).
    CorruptCheckpointError: the checkpoint's files cannot be read or decoded (one line).
    OSError: the OS refused the read.
  """
  path = storage.absolute(path)
  if not is_committed(path):
    raise FileNotFoundError(f"No finished checkpoint at {path}")
  handler = ocp.PyTreeCheckpointHandler()
  checkpointer = ocp.Checkpointer(handler)
  try:
    with orbax_errors(path):
      saved = handler.metadata(storage.as_path(path)).tree  # the saved tree's structure, no array read
      if not isinstance(saved, Mapping) or key not in saved:
        raise KeyError(f"checkpoint {path} holds no {key!r} (entries: {sorted(saved or {})})")
      item = {key: saved[key]}
      restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), item)
      return checkpointer.restore(path, args=ocp.args.PyTreeRestore(
          item=item, restore_args=restore_args, partial_restore=True))[key]
  except (OSError, KeyError):
    raise
  except Exception as e:  # TensorStore reports unreadable array files as a plain Exception
    raise CorruptCheckpointError(f"checkpoint {path} cannot be read: {short_error(e)}") from None
  finally:
    checkpointer.close()


def verify_entry(step_dir: str | os.PathLike, key: str, tree: PyTree) -> bool:
  """Checks one entry of a :class:`Checkpointer` step read on its own (e.g. ``params`` through
  :func:`load_pytree` of ``<step_dir>/state``) against the checksum saved with the step.

  Args:
    step_dir: the step directory (``<checkpoint dir>/<step>``).
    key: the entry of the saved dict state (``"params"``).
    tree: its restored values, in the structure it was saved with.
  Returns:
    True if verified; False if the step has no checksum for ``key`` (saved before checksums) or
    ``tree`` has other dtypes/shapes than those saved (then it cannot be compared).
  Raises:
    CorruptCheckpointError: the values differ from those saved, or the metadata cannot be read.
  """
  step_dir = storage.absolute(step_dir)
  checkpointer = ocp.Checkpointer(ocp.JsonCheckpointHandler())
  try:
    with orbax_errors(step_dir):
      metadata = checkpointer.restore(storage.join(step_dir, "metadata"))
  except OSError:
    raise
  except Exception as e:  # a damaged or missing metadata item
    raise CorruptCheckpointError(f"checkpoint {step_dir} cannot be read: metadata ({short_error(e)})") from None
  finally:
    checkpointer.close()
  record = (metadata or {}).get(INTEGRITY_KEY, {}).get(key) if isinstance(metadata, Mapping) else None
  if not isinstance(record, Mapping) or record.get("layout") != layout(tree):
    return False
  verify(step_dir, {key: record}, {key: tree})
  return True
