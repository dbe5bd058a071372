"""Errors raised on bad user input (configs, data paths, array shapes)."""
from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
  """A config field holds a value that is not allowed.

  The message always names the field, the value found, and what is allowed, e.g.
  ``rl.credit='dpss' is not allowed: expected one of ['dps', 'uniform'] (credit assigner)``.
  """

  def __init__(self, field: str, value: Any, allowed: str):
    self.field = field
    self.value = value
    self.allowed = allowed
    super().__init__(f"{field}={value!r} is not allowed: expected {allowed}")

  def __reduce__(self):  # rebuilt from its fields where it crosses a process (a grid's worker processes)
    return type(self), (self.field, self.value, self.allowed)


class DataError(ValueError):
  """A data file (benchmark CSV/JSON) or a data request cannot be used; the message names the file and
  the line, or the config field, and what is wrong."""


class NonFiniteError(RuntimeError):
  """Training produced a NaN/inf value; the run stopped before saving it (see :mod:`daca_jax.run.guards`).

  Attributes:
    phase: "SFT" or "RL".
    step: the step (SFT optimizer step / RL iteration) whose result was not finite.
    quantity: what was not finite: "loss", "gradient norm", "parameters", "optimizer state" or
      "credit state" (the first of these, in that order).
  """

  def __init__(self, phase: str, step: int, quantity: str, resume: str):
    self.phase, self.step, self.quantity, self.resume = phase, step, quantity, resume
    super().__init__(f"{phase} step {step}: the {quantity} is not finite (NaN or inf); stopped without "
                     f"saving it. {resume}")

  def __reduce__(self):
    return type(self), (self.phase, self.step, self.quantity, self.resume)


class ShapeError(ConfigError):
  """An array argument has a shape (or rank, or dtype kind) that the function cannot use.

  Raised at trace time, before any work, instead of letting the value broadcast into a silently wrong
  result. The message names the argument, the shape found and the shape expected, e.g.
  ``batch.advantages has shape (8, 1); expected (8,) ([B]: one advantage per sequence)``.

  Attributes:
    field: the argument (``batch.advantages``, ``logits_fn(params, tokens) output``).
    value: the shape found (a tuple), or the value found for a scalar argument (``prompt_len``).
    allowed: the shape expected, in words and numbers.
  """

  def __init__(self, field: str, found: Any, expected: str, what: str = "shape"):
    self.field = field
    self.value = found
    self.allowed = expected
    self.what = what
    ValueError.__init__(self, f"{field} has {what} {found}; expected {expected}")

  def __reduce__(self):
    return type(self), (self.field, self.value, self.allowed, self.what)


class DoesNotFit(RuntimeError):
  """A run's compiled programs need more memory per device than the machine it was compiled for has
  (``experiments/train.py --compile_only --target=...``). The message names the program, by how much, and
  its largest buffers."""


class WorkerDied(RuntimeError):
  """A worker process of a grid (``experiments/reproduce.py --jobs``) ended without an answer: killed by
  the system (out of memory, a signal) or by a crash inside XLA. The cells that finished are kept; the
  message names the cells that were running."""

