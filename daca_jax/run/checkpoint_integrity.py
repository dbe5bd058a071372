"""Checkpoint integrity: a checksum of each saved state entry, and its check on restore.

Every save stores, under the reserved metadata key :data:`INTEGRITY_KEY`, per top-level entry of a dict
state (e.g. ``params``, ``opt_state``), the checksum of its values (:func:`daca_jax.run.checksum.tree_checksum`,
computed on device) and a digest of its leaves' dtypes and shapes; a restore recomputes it
(:func:`verify`) and raises :class:`CorruptCheckpointError` for values that changed on disk.
:mod:`daca_jax.run.checkpoint` uses it and re-exports :class:`CorruptCheckpointError`.
"""
from __future__ import annotations

import hashlib
import logging
from typing import Any, Mapping

import jax

from daca_jax.errors import DataError
from daca_jax.run.checksum import tree_checksum

PyTree = Any

# Reserved metadata key: per entry of the state, the checksum of its values and a digest of its
# leaves' dtypes and shapes (``{"params": {"checksum": ..., "layout": ...}, ...}``).
INTEGRITY_KEY = "__state_integrity__"
_log = logging.getLogger("daca_jax.run.checkpoint")  # the name the checkpoint's warnings always had


class CorruptCheckpointError(DataError):
  """A checkpoint cannot be read back as saved: its files cannot be read or decoded, or the restored
  values do not match the checksum stored when it was saved."""


def layout(tree: PyTree) -> str:
  """Short digest of the dtypes and shapes of ``tree``'s leaves (a restore into other dtypes or
  another structure changes the bits, so a checksum is only comparable when the layout is the same)."""
  desc = ";".join(f"{getattr(x, 'dtype', type(x).__name__)}{tuple(getattr(x, 'shape', ()))}"
                  for x in jax.tree.leaves(tree))
  return hashlib.sha256(desc.encode()).hexdigest()[:16]


def entries(state: PyTree) -> dict[str, PyTree]:
  """The separately checksummed parts of a state: a dict's entries, else the whole state as ``""``."""
  if isinstance(state, Mapping) and state and all(isinstance(k, str) for k in state):
    return dict(state)
  return {"": state}


def integrity(state: PyTree) -> dict[str, dict[str, str]]:
  """The integrity record of ``state``: per entry (:func:`entries`), its checksum and layout digest."""
  return {k: {"checksum": tree_checksum(v), "layout": layout(v)} for k, v in entries(state).items()}


def verify(where: str, stored: Mapping[str, Any], entries: Mapping[str, PyTree]) -> None:
  """Compares restored ``entries`` with the ``stored`` integrity record of checkpoint ``where``."""
  for key, tree in entries.items():
    record = stored.get(key)
    if not isinstance(record, Mapping):
      continue
    if record.get("layout") != layout(tree):
      _log.warning("%s%s restored into other dtypes/shapes than saved: checksum not verified", where,
                   f" ({key})" if key else "")
      continue
    found = tree_checksum(tree)
    if found != record.get("checksum"):
      what = f"its '{key}'" if key else "its state"
      raise CorruptCheckpointError(f"checkpoint {where} is damaged: the checksum of {what} is {found}, "
                                   f"it was {record.get('checksum')} when saved")
