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


class DataError(ValueError):
  """A data file (benchmark CSV/JSON) or a data request cannot be used; the message names the file and
  the line, or the config field, and what is wrong."""
