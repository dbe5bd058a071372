"""Checks, before any work, that every batch a run builds splits over its processes and devices.

The main job's SFT, rollout and update steps split their batches over the mesh's
``data x fsdp`` devices (and, multi-host, over the processes) when they are called; a batch that
does not split would otherwise fail only then, e.g. after the SFT warm start, with the workdir
already holding that run.
"""
from __future__ import annotations

import jax
from jax.sharding import Mesh

from daca_jax.errors import ConfigError
from daca_jax.diffusion.rollout import micro_batch_rows
from daca_jax.parallel import check_batch_size, is_multiprocess, num_batch_shards, process_slice
from daca_jax.rl.accumulate import check_grad_accum
from daca_jax.config.train import TrainConfig


def check_batches_fit(cfg: TrainConfig, mesh: Mesh | None) -> None:
  """Raises unless every batch of ``cfg`` splits over ``mesh`` (None: ``parallel.strategy='none'``).

  Checked: the RL batch ``rl.prompts_per_step * rl.group_size`` over the ``data x fsdp`` devices
  (rollout and update, one process or several), its ``rl.grad_accum`` micro-batches and the sampler's
  ``rl.rollout_batch`` rows too, and the sampled batch ``rl.prompts_per_step *
  rl.sample_group_size`` (down-sampling, one process only); multi-host, also ``rl.prompts_per_step`` and
  ``sft.batch_size`` over the processes and ``sft.batch_size`` over the devices. Evaluation
  batches are padded to fit, so they need no check.

  Raises:
    ConfigError: naming the field, its value and the multiple it must be.
  """
  multi = is_multiprocess()
  if mesh is None:
    if multi:
      raise ConfigError("parallel.strategy", cfg.parallel.strategy,
                        f"'pmap' or 'fsdp' in a run over {jax.process_count()} processes")
    return
  if cfg.rl.steps:
    if multi:
      process_slice(cfg.rl.prompts_per_step)
      if cfg.rl.sample_group_size not in (0, cfg.rl.group_size):
        raise ConfigError("rl.sample_group_size", cfg.rl.sample_group_size,
                          f"0 in a run over {jax.process_count()} processes (down-sampling picks rows "
                          "of one process's rollout)")
    check_batch_size(cfg.rl.prompts_per_step * cfg.rl.group_size, mesh)
    if cfg.rl.sample_group_size:
      check_batch_size(cfg.rl.prompts_per_step * cfg.rl.sample_group_size, mesh,
                       "rl.prompts_per_step * rl.sample_group_size")
    shards = num_batch_shards(mesh)
    check_grad_accum(cfg.rl.prompts_per_step * cfg.rl.group_size, cfg.rl.grad_accum, cfg.rl.group_size, shards)
    if cfg.rl.rollout_batch:
      micro_batch_rows(cfg.rl.prompts_per_step * (cfg.rl.sample_group_size or cfg.rl.group_size),
                       cfg.rl.rollout_batch, shards)
  if multi and cfg.sft.steps:
    process_slice(cfg.sft.batch_size, field="sft.batch_size")
    shards = num_batch_shards(mesh)
    if cfg.sft.batch_size % shards:
      raise ConfigError("sft.batch_size", cfg.sft.batch_size, f"a multiple of the {shards} batch shards")
