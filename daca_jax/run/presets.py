"""The config files of ``configs/`` and the presets each declares (``--config=configs/<file>.py[:<preset>]``).

A config file is a module with ``get_config(preset)``; it declares its presets in a module-level
``PRESETS`` (a sequence of names, the first the default; with a ``PRESET_PATTERN`` text, ``--help``
shows that instead of the names). A ``get_config()`` without a preset argument
(``configs/base.py``: the defaults) has no presets. ``experiments/train.py --help`` lists them and the
tests build every one.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import pathlib
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class ConfigFile:
  """One config file.

  Attributes:
    path: the file (``configs/<stem>.py``).
    presets: its declared presets (``()`` when it declares none).
    get_config: its ``get_config([preset]) -> ConfigDict``.
    takes_preset: whether ``get_config`` takes a preset.
    pattern: the file's ``PRESET_PATTERN`` ("" if none): how ``--help`` describes presets too many to
      list (``configs/paper.py``'s 252).
  """

  path: pathlib.Path
  presets: tuple[str, ...]
  get_config: Callable[..., Any]
  takes_preset: bool
  pattern: str = ""

  def build(self, preset: str | None = None) -> Any:
    """``get_config(preset)``, or ``get_config()`` for a file without presets (``preset`` None)."""
    return self.get_config(preset) if preset is not None else self.get_config()

  @property
  def flag(self) -> str:
    """``configs/<stem>.py``: how ``--config`` names it."""
    return f"{self.path.parent.name}/{self.path.name}"


def config_files(directory: str | pathlib.Path) -> list[ConfigFile]:
  """The config files in ``directory`` (e.g. the repository's ``configs``), sorted by name; modules
  without ``get_config`` (``base.py``, study arms) are not configs. Each file is loaded from its path,
  as ``--config`` loads it; its own ``from configs import base`` finds the installed ``configs`` package.

  Raises:
    ImportError: a config file does not import.
  """
  directory = pathlib.Path(directory).resolve()
  found = []
  for path in sorted(directory.glob("*.py")):
    if path.name.startswith("_"):
      continue
    spec = importlib.util.spec_from_file_location(f"_daca_config_{directory.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if callable(getattr(module, "get_config", None)):
      takes = bool(inspect.signature(module.get_config).parameters)
      found.append(ConfigFile(path, tuple(getattr(module, "PRESETS", ())), module.get_config, takes,
                              str(getattr(module, "PRESET_PATTERN", ""))))
  return found


def presets_help(directory: str | pathlib.Path) -> str:
  """The config files and their presets, for ``--help``."""
  lines = ["Configs (--config=<file>[:<preset>], the first preset is the default):"]
  for cf in config_files(directory):
    presets = (f"{cf.pattern} ({len(cf.presets)} presets, the first {cf.presets[0]})" if cf.pattern and cf.presets
               else ", ".join(cf.presets) if cf.presets else
               "(no PRESETS declared)" if cf.takes_preset else "(no presets: the defaults)")
    lines.append(f"  {cf.flag}: {presets}")
  lines.append("Every field, with its meaning, is in configs/base.py; override one with --config.<field>=<value>.")
  return "\n".join(lines)
