"""Frozen dataclasses that are JAX pytrees (array fields are leaves, ``static`` fields are treedef data).

The same behaviour as ``flax.struct.dataclass`` (which the contracts replace so that they import only
JAX): ``field(static=True)`` marks a field that is part of the tree structure (a Python int such as
``prompt_len``, hashed by ``jit``); every other field is a child (an array, None, or a pytree);
``replace(**changes)`` returns a copy.
"""
from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import jax

T = TypeVar("T")


def field(*, static: bool = False, **kwargs: Any) -> Any:
  """A ``dataclasses.field``; ``static=True`` keeps it out of the leaves (static under ``jit``)."""
  return dataclasses.field(metadata={"static": static}, **kwargs)


def pytree_dataclass(cls: type[T]) -> type[T]:
  """Makes ``cls`` a frozen dataclass registered as a pytree, with a ``replace`` method."""
  cls = dataclasses.dataclass(frozen=True)(cls)
  fields = dataclasses.fields(cls)
  meta = [f.name for f in fields if f.metadata.get("static", False)]
  data = [f.name for f in fields if not f.metadata.get("static", False)]
  jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)

  def replace(self: T, **changes: Any) -> T:
    """A copy with ``changes`` applied (``dataclasses.replace``)."""
    return dataclasses.replace(self, **changes)

  cls.replace = replace
  return cls
