"""Training dashboards: TensorBoard event files (tensorboardX) and Weights & Biases, beside metrics.jsonl.

Every record the pipeline writes to a metrics JSONL file is mirrored, with the same metric names, as
scalars of one TensorBoard *run* per phase under ``<workdir>/tb/``: ``sft`` (the SFT loss log),
``rl`` (``metrics.jsonl``: one point per RL iteration, ``val/...`` at the validation points) and
``eval`` (the test-set evaluation before RL at step 0 and after RL at step ``rl.steps``). RL also
gets a few trajectory images (``log.trajectory_every``). Open them with ``tensorboard --logdir <workdir>``.

A resumed run continues its event files: the writer is opened with ``purge_step`` = the first step it
redoes, so TensorBoard drops the points a killed run logged after its last checkpoint (as the JSONL
log drops its lines, :meth:`daca_jax.run.metrics.MetricsWriter.truncate_after`).

W&B (``log.wandb=<project>``) is optional: asked for without the package installed, the run stops
with a ConfigError before any work (:func:`check_log_config`).
"""
from __future__ import annotations

import importlib.util
import numbers
import os
import time
from typing import Any, Mapping

import numpy as np

from daca_jax import storage
from daca_jax.errors import ConfigError
from daca_jax.config.train import LogConfig

PHASES = ("sft", "rl", "eval")


def check_log_config(cfg: LogConfig) -> None:
  """Refuses dashboards whose package is not installed (before any work starts).

  Raises:
    ConfigError: ``log.wandb`` set without ``wandb`` installed, or ``log.tensorboard`` without
      ``tensorboardX``.
  """
  if cfg.wandb and importlib.util.find_spec("wandb") is None:
    raise ConfigError("log.wandb", cfg.wandb, "'' (off) unless the wandb package is installed "
                      "(pip install wandb)")
  if cfg.tensorboard and importlib.util.find_spec("tensorboardX") is None:
    raise ConfigError("log.tensorboard", cfg.tensorboard, "False unless tensorboardX is installed "
                      "(pip install tensorboardX; it is a dependency of daca_jax)")


def scalar_items(record: Mapping[str, Any]) -> list[tuple[str, float]]:
  """The numeric entries of a metrics record (``step`` and bools, strings, lists left out)."""
  return [(k, float(v)) for k, v in record.items()
          if k != "step" and isinstance(v, numbers.Real) and not isinstance(v, bool)]


class PhaseSink:
  """Writes one phase's scalars and images to TensorBoard (and W&B); see :class:`Dashboard`."""

  def __init__(self, phase: str, tb_writer: Any, wandb_run: Any):
    self.phase, self._tb, self._wandb = phase, tb_writer, wandb_run

  def __call__(self, step: int, record: Mapping[str, Any]) -> None:
    """Mirrors one metrics record (the MetricsWriter ``mirror`` hook)."""
    items = scalar_items(record)
    if self._tb is not None:
      for name, value in items:
        self._tb.add_scalar(name, value, global_step=int(step))
      self._tb.flush()
    if self._wandb is not None and items:
      self._wandb.log({f"{self.phase}/{k}": v for k, v in items} | {f"{self.phase}/step": int(step)})

  def image(self, tag: str, step: int, rgb: np.ndarray) -> None:
    """One image, uint8 [H, W, 3]."""
    if self._tb is not None:
      self._tb.add_image(tag, rgb, global_step=int(step), dataformats="HWC")
      self._tb.flush()
    if self._wandb is not None:
      import wandb

      self._wandb.log({f"{self.phase}/{tag}": wandb.Image(rgb), f"{self.phase}/step": int(step)})

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()
      self._tb = None


def _summary_writer_class() -> type:
  """``tensorboardX.SummaryWriter``, imported without PyTorch.

  tensorboardX's writer module tries ``import torch`` at import time only to accept torch tensors as
  values (we log Python floats); with torch installed (the ``[hf]`` extra) that costs ~5 s per
  process. Where torch is not loaded yet it is hidden for the duration of this one import (an entry
  of ``None`` in ``sys.modules`` makes ``import torch`` raise ImportError), and a later
  ``import torch`` works as usual.
  """
  import sys

  if "tensorboardX.writer" in sys.modules or "torch" in sys.modules:
    from tensorboardX import SummaryWriter
    return SummaryWriter
  sys.modules["torch"] = None  # type: ignore[assignment]
  try:
    from tensorboardX import SummaryWriter
  finally:
    if sys.modules.get("torch", 0) is None:
      del sys.modules["torch"]
  return SummaryWriter


class Dashboard:
  """The run's dashboards: TensorBoard event files under ``<workdir>/tb/<phase>`` and a W&B run.

  Args:
    workdir: the run's workdir.
    cfg: the ``log`` config section.
    run_config: the run's config (W&B records it with the run).
  Raises:
    ConfigError: see :func:`check_log_config`.
  """

  def __init__(self, workdir: str | os.PathLike, cfg: LogConfig, run_config: Mapping[str, Any] | None = None):
    check_log_config(cfg)
    self.workdir, self.cfg = storage.as_path(workdir), cfg
    self._wandb = None
    if cfg.wandb:
      import wandb

      # W&B keeps its own files in a local folder: the workdir, or its temporary folder for a gs:// one
      local = None if storage.is_remote(self.workdir) else str(self.workdir)
      self._wandb = wandb.init(project=cfg.wandb, name=self.workdir.name, dir=local,
                               config=dict(run_config or {}))
      for phase in PHASES:
        self._wandb.define_metric(f"{phase}/*", step_metric=f"{phase}/step")
    self._sinks: list[PhaseSink] = []

  def sink(self, phase: str, resume_after: int = 0) -> PhaseSink:
    """A writer for ``phase`` ("sft", "rl" or "eval") continuing after step ``resume_after``
    (points a previous session logged after it are dropped)."""
    if phase not in PHASES:
      raise ValueError(f"phase {phase!r} is not one of {PHASES}")
    tb = None
    if self.cfg.tensorboard:
      SummaryWriter = _summary_writer_class()
      # The suffix keeps a session's file apart from one opened in the same second (the name has
      # seconds); TensorBoard reads a folder's files in name order.
      tb = SummaryWriter(str(self.workdir / "tb" / phase), purge_step=resume_after + 1 if resume_after else None,
                         flush_secs=30, filename_suffix=f".{time.time_ns()}")
    sink = PhaseSink(phase, tb, self._wandb)
    self._sinks.append(sink)
    return sink

  def close(self) -> None:
    for s in self._sinks:
      s.close()
    if self._wandb is not None:
      self._wandb.finish()
      self._wandb = None

  def __enter__(self) -> "Dashboard":
    return self

  def __exit__(self, *exc: Any) -> None:
    self.close()
