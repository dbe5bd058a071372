"""Which part of a policy's parameters an update changes.

A LoRA policy's parameters are ``{"base": frozen weights, "lora": adapters}``; its update changes the
adapters only. A compiled step that returns the whole tree also returns a fresh copy of the frozen
base (XLA does not forward an unchanged input to an output), which costs one copy of the model per
device at every update. With a :class:`ParamSplit` the compiled step returns the trainable part only
and the caller's frozen arrays are put back around it (:func:`daca_jax.parallel.compile_update`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class ParamSplit:
  """The trainable part of a parameter tree and how to put a new one back.

  Attributes:
    trainable: ``params -> subtree`` the optimizer changes (also applied to a tree of shardings of
      the same structure).
    replace: ``(params, new_subtree) -> params`` with that subtree replaced and everything else the
      same objects (not copies).
  """

  trainable: Callable[[Any], Any]
  replace: Callable[[Any, Any], Any]


__all__ = ["ParamSplit"]
