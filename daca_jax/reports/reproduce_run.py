"""What ``experiments/reproduce.py`` runs: its config files and study arms loaded, the cells its flags ask
for, and the files a grid writes (``grid.md``, ``grid.png``, ``results.json``, a variants file).

The grid itself (cells, shared warm starts, the summary) is :mod:`daca_jax.reports.reproduce`.
"""
from __future__ import annotations

import importlib.util
import pathlib
import types
from typing import Any, Mapping, Sequence

from daca_jax.config.configure import train_config_from_dict
from daca_jax.errors import ConfigError
from daca_jax.io_utils import atomic_write_json, atomic_write_text, check_dir_path
from daca_jax.reports import reproduce as rp
from daca_jax.reports import variant_runs
from daca_jax.run.cli_errors import running_python_file
from daca_jax.config.train import TrainConfig

# What results.json keeps of each finished cell.
CELL_FIELDS = ("eval_before", "eval_after", "val_before", "val_after", "reward_trend", "grad_agreement", "timings")


def load_module(path: str, flag: str) -> types.ModuleType:
  """The Python file ``path`` as a module (``flag`` names it in the error).

  Raises:
    ConfigError: not an existing file, or one that does not parse or raises on import (the file and
      line named: :func:`daca_jax.run.cli_errors.running_python_file`).
  """
  file = pathlib.Path(path)
  with running_python_file(flag, path):
    module_spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
  return module


def load_config(spec: str) -> TrainConfig:
  """The TrainConfig of ``path[:preset]`` (a ``--configs`` entry).

  Raises:
    ConfigError: the file is missing, does not run, has no ``get_config()``, or its ``get_config()``
      raises or returns no config (each naming ``--configs``, the file and, where it raised, the line).
  """
  path, _, preset = spec.partition(":")
  module = load_module(path, "--configs")
  with running_python_file("--configs", spec):
    config = module.get_config(preset) if preset else module.get_config()
  if not isinstance(config, Mapping) and not hasattr(config, "to_dict"):
    raise ConfigError("--configs", spec, f"a file whose get_config() returns a config (an ml_collections."
                      f"ConfigDict, as configs/*.py do); it returned {type(config).__name__}")
  return train_config_from_dict(config)


def check_args(workdir: str | None, lists: Mapping[str, Sequence[str]], finished_only: bool = False) -> list[int]:
  """Checks the command's output folder and comma-separated lists (``{"--seeds": [...], ...}``); returns
  the seeds.

  Raises:
    ConfigError: no ``workdir`` (or an empty one, a file or one under a file; with ``finished_only``,
      which runs nothing, one that does not exist), an empty list, or a seed that is not an integer >= 0.
  """
  if workdir is None:
    raise ConfigError("--workdir", "", "an output directory")
  check_dir_path(workdir, "--workdir")
  if finished_only and not pathlib.Path(workdir).is_dir():
    raise ConfigError("--workdir", workdir, "an existing grid folder with --finished_only (it summarises the "
                      "cells finished there and runs nothing); this one does not exist")
  for name, values in lists.items():
    if not values:
      raise ConfigError(name, "", "a non-empty comma-separated list")
  seeds = lists.get("--seeds", [])
  if not all(s.strip().isdigit() for s in seeds):
    raise ConfigError("--seeds", ",".join(seeds), "comma-separated integers >= 0")
  return [int(s) for s in seeds]


def task_configs(specs: Sequence[str], preset: str, num_val_examples: int | None = None) -> dict[str, TrainConfig]:
  """``task name -> config`` of each ``--configs`` entry under the grid preset ``preset``
  (:data:`daca_jax.reports.reproduce.PRESETS`), with ``task.num_val_examples`` when given."""
  configs = {}
  for spec in specs:
    cfg = load_config(spec)
    if num_val_examples is not None:
      cfg = rp.with_overrides(cfg, [("task.num_val_examples", num_val_examples)])
    configs[cfg.task.name] = rp.PRESETS[preset](cfg)
  return configs


def check_study_arms(study: str, named: Any, references: Any) -> None:
  """Checks what a ``--study`` file's ``get_arms()`` and ``get_references()`` returned.

  Raises:
    ConfigError: ``named`` is not a dict of arm name -> list of ``(dotted.field, value)`` overrides, or
      ``references`` not a dict of arm name -> arm name (naming ``--study``, the file and the entry).
  """
  arms_form = "a file whose get_arms() returns {arm name: [(dotted.field, value), ...]} (as configs/credit_study.py's)"
  if not isinstance(named, Mapping) or not named:
    raise ConfigError("--study", study, f"{arms_form}; it returned {type(named).__name__} {named!r:.80}")
  for name, overrides in named.items():
    if (not isinstance(name, str) or not isinstance(overrides, (list, tuple))
        or not all(isinstance(o, (list, tuple)) and len(o) == 2 and isinstance(o[0], str) for o in overrides)):
      raise ConfigError("--study", study, f"{arms_form}; its arm {name!r} is {overrides!r:.80}")
  if not isinstance(references, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in references.items()):
    raise ConfigError("--study", study, "a file whose get_references() returns {arm name: reference arm name}; "
                      f"it returned {references!r:.80}")


def requested_cells(configs: Mapping[str, TrainConfig], seeds: Sequence[int], *, bases: Sequence[str],
                    arms: Sequence[str], study: str | None = None, arms_given: bool = False) -> list[rp.Cell]:
  """The cells of the command: ``study``'s arms (``path[:variant]``: a file whose ``get_arms()``, or
  ``get_arms(variant)``, names arms by overrides, and whose optional ``get_references()`` names the arm each
  one is paired with; with ``arms_given``, only ``arms`` of them), else each ``base[:arm/arm]`` of ``bases``
  with ``arms``.

  Raises:
    ConfigError: an unknown arm or base, or a study override the configs refuse (before any work).
  """
  if study:
    path, _, variant = study.partition(":")
    module = load_module(path, "--study")
    with running_python_file("--study", study):
      named = module.get_arms(variant) if variant else module.get_arms()
      references = module.get_references() if hasattr(module, "get_references") else {}
    check_study_arms(study, named, references)
    if arms_given:  # a subset of the study's arms
      unknown = [a for a in arms if a not in named]
      if unknown:
        raise ConfigError("--arms", ",".join(unknown), f"arms of {study}: {list(named)}")
      named = {a: named[a] for a in arms}
    for overrides in named.values():
      for c in configs.values():  # a bad override: a clear error before any work
        rp.with_overrides(c, overrides)
    return rp.study_grid(list(configs), seeds, named, {a: r for a, r in references.items() if a in named})
  cells = []
  for spec in bases:
    base, _, own = spec.partition(":")
    base_arms = own.split("/") if own else list(arms)
    for arm in base_arms:
      rp.arm_methods(base, arm)  # unknown arm or base: a clear error before any work
    cells += rp.grid(list(configs), [base], seeds, arms=base_arms)
  return cells


def recipe_deviations(study: str | None, config: str, preset: str) -> str:
  """The markdown table of how ``study``'s arms (run on ``config`` under grid ``preset``) differ from their
  methods' published presets (:func:`daca_jax.reports.recipes.deviations`).

  Raises:
    ConfigError: no ``--study``, or a study file without ``get_bases()``.
  """
  from configs import paper
  from daca_jax.reports.recipes import deviations

  if not study:
    raise ConfigError("--study", "", "a study file (e.g. configs/sota_grid.py) with --deviations")
  module = load_module(study.partition(":")[0], "--study")
  if not hasattr(module, "get_bases"):
    raise ConfigError("--study", study, "a file defining get_bases() (arm -> configs/paper.py base), as "
                      "configs/sota_grid.py does, with --deviations")
  (name, cfg), = task_configs([config], preset).items()
  task = {"sudoku4x4": "sudoku"}.get(name, name)
  return deviations(module.get_arms(), module.get_bases(), task, lambda o: rp.with_overrides(cfg, o),
                    lambda p: train_config_from_dict(paper.get_config(p)))


def write_grid(work: pathlib.Path, preset: str, cells: Sequence[rp.Cell], results: Mapping[str, dict[str, Any]]
               ) -> tuple[list[rp.Cell], str]:
  """Writes ``grid.md``, ``grid.png`` and ``results.json`` of the finished cells into ``work``; returns
  those cells and the markdown table."""
  done = [c for c in cells if c.key in results]
  rows = rp.summarize(done, results)
  table = rp.markdown(rows)
  atomic_write_text(work / "grid.md", table + "\n")
  rp.plot(rows, work / "grid.png")
  atomic_write_json(work / "results.json", {
      "preset": preset, "rows": rows,
      "cells": {c.key: {k: results[c.key][k] for k in CELL_FIELDS if k in results[c.key]} for c in done}})
  return done, table


def write_variants(path: pathlib.Path, cells: Sequence[rp.Cell], work: pathlib.Path, *, preset: str,
                   sealed_test: bool = False) -> None:
  """The finished ``cells`` as a variants file at ``path`` (:mod:`daca_jax.reports.variant_runs`), each
  run's per-example outcomes copied into ``<path stem>/`` beside it."""
  lists = {}
  for c in cells:
    lists.setdefault(variant_runs.list_key(c.task), []).append(variant_runs.variants_run(
        work / "cells" / c.key, arm=c.arm, seed=c.seed, overrides=c.overrides, metric=rp.primary_metric(c.task),
        folder=path.parent, outcomes_dir=path.parent / path.stem, sealed_test=sealed_test))
  variant_runs.write_variants(path, lists, what=f"experiments/reproduce.py grid {work} (--preset={preset})"
                              + (", test set sealed" if sealed_test else ""))


__all__ = ["CELL_FIELDS", "check_args", "load_config", "load_module", "requested_cells", "task_configs",
           "write_grid", "write_variants"]
