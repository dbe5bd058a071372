"""Multi-host setup (DESIGN §10): one process per host, each loading its own slice of the prompts.

On a Cloud TPU pod slice, ``jax.distributed.initialize()`` finds the coordinator, the process count
and this process's id itself (as it does under SLURM / Open MPI / Kubernetes). Elsewhere (e.g. plain
multi-node GPU) set ``JAX_COORDINATOR_ADDRESS=host:port`` (read by JAX), ``JAX_NUM_PROCESSES`` and
``JAX_PROCESS_ID`` (read here); see ``experiments/scripts/``.
"""
from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from daca_jax.errors import ConfigError
from daca_jax.parallel.mesh import BATCH_AXES
from daca_jax.types import ParallelConfig


def _env_int(name: str) -> int | None:
  v = os.environ.get(name)
  if v is None or v == "":
    return None
  try:
    return int(v)
  except ValueError:
    raise ConfigError(f"${name}", v, "an integer") from None


def maybe_initialize(cfg: ParallelConfig) -> bool:
  """Calls ``jax.distributed.initialize()`` when ``cfg.distributed`` is set or the environment names
  a coordinator (``JAX_COORDINATOR_ADDRESS``). Must run before the first device query.

  Returns:
    True when this is a multi-process run (initialised now or before).
  """
  if jax.distributed.is_initialized():
    return True
  if not (cfg.distributed or os.environ.get("JAX_COORDINATOR_ADDRESS")):
    return False
  jax.distributed.initialize(num_processes=_env_int("JAX_NUM_PROCESSES"),
                             process_id=_env_int("JAX_PROCESS_ID"))
  return True


def process_slice(num_items: int, process_index: int | None = None,
                  process_count: int | None = None) -> slice:
  """This process's contiguous share of ``num_items`` prompts (equal shares, in process order).

  Raises:
    ConfigError: ``num_items`` is not a multiple of the number of processes (shares would differ,
      and every process must contribute the same number of rows to a global batch).
  """
  i = jax.process_index() if process_index is None else process_index
  n = jax.process_count() if process_count is None else process_count
  if num_items % n:
    raise ConfigError("rl.prompts_per_step", num_items, f"a multiple of the {n} processes")
  share = num_items // n
  return slice(i * share, (i + 1) * share)


def global_batch(local: Any, mesh: Mesh) -> Any:
  """Global arrays, batch split over ``('data', 'fsdp')``, from each process's local rows.

  ``local`` is a tree of host arrays whose leading axis holds this process's rows (in process order,
  as :func:`process_slice` hands them out); wraps ``jax.make_array_from_process_local_data``.
  """
  sharding = NamedSharding(mesh, P(BATCH_AXES))
  return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), local)
