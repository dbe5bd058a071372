"""Multi-host setup: one process per host, each loading its own slice of the prompts.

On a Cloud TPU pod slice, ``jax.distributed.initialize()`` finds the coordinator, the process count
and this process's id itself (as it does under SLURM / Open MPI / Kubernetes). Elsewhere (e.g. plain
multi-node GPU) set ``JAX_COORDINATOR_ADDRESS=host:port`` (read by JAX), ``JAX_NUM_PROCESSES`` and
``JAX_PROCESS_ID`` (read here); see ``experiments/scripts/``.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from daca_jax.errors import ConfigError
from daca_jax.parallel.mesh import BATCH_AXES
from daca_jax.config.parallel import ParallelConfig


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
  try:  # CPU processes (tests, laptops) need a cross-process collectives library; GPUs/TPUs ignore it
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  except (AttributeError, ValueError):  # a JAX without the option: its default is used
    pass
  jax.distributed.initialize(num_processes=_env_int("JAX_NUM_PROCESSES"),
                             process_id=_env_int("JAX_PROCESS_ID"))
  return True


def process_slice(num_items: int, process_index: int | None = None,
                  process_count: int | None = None, field: str = "rl.prompts_per_step") -> slice:
  """This process's contiguous share of ``num_items`` prompts (equal shares, in process order).

  Raises:
    ConfigError: ``num_items`` (the config ``field`` it comes from) is not a multiple of the number
      of processes (shares would differ, and every process must contribute the same number of rows
      to a global batch).
  """
  i = jax.process_index() if process_index is None else process_index
  n = jax.process_count() if process_count is None else process_count
  if num_items % n:
    raise ConfigError(field, num_items, f"a multiple of the {n} processes")
  share = num_items // n
  return slice(i * share, (i + 1) * share)


def global_batch(local: Any, mesh: Mesh) -> Any:
  """Global arrays, batch split over ``('data', 'fsdp')``, from each process's local rows.

  ``local`` is a tree of host arrays whose leading axis holds this process's rows (in process order,
  as :func:`process_slice` hands them out); wraps ``jax.make_array_from_process_local_data``.
  """
  sharding = NamedSharding(mesh, P(BATCH_AXES))
  return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), local)


def is_multiprocess() -> bool:
  """Whether this run spans several processes (hosts)."""
  return jax.process_count() > 1


def is_primary() -> bool:
  """Whether this process writes the run's host-side files (logs, metrics, results): process 0."""
  return jax.process_index() == 0


def rows_to_devices(rows: np.ndarray, mesh: Mesh | None, field: str) -> Any:
  """One global batch from the rows every process computed identically (e.g. the prompts of a step,
  chosen by the seed): each process contributes its :func:`process_slice`.

  In a single process (or without a mesh) ``rows`` is returned unchanged, so single-host runs keep
  their exact code path.

  Args:
    rows: [N, ...] host array, the same on every process.
    mesh: the run's mesh.
    field: the config field N comes from, for the error.
  Raises:
    ConfigError: N is not a multiple of the number of processes.
  """
  if mesh is None or not is_multiprocess():
    return rows
  return global_batch(np.asarray(rows)[process_slice(len(rows), field=field)], mesh)


def to_host(tree: Any) -> Any:
  """Host numpy copies of (possibly global, multi-process) arrays, whole on every process."""
  if not is_multiprocess():
    return jax.tree.map(np.asarray, tree)
  from jax.experimental import multihost_utils

  def one(x: Any) -> np.ndarray:
    if not isinstance(x, jax.Array) or x.is_fully_addressable or x.is_fully_replicated:
      return np.asarray(x)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))

  return jax.tree.map(one, tree)


def to_global(tree: Any, mesh: Mesh | None, shardings: Any = None) -> Any:
  """Global arrays from values that are the same on every process (freshly initialised parameters,
  optimizer states, PRNG keys), placed with ``shardings`` (a tree like ``tree``, or one sharding for
  every leaf; default: replicated over ``mesh``).

  Multi-process checkpoints and jitted steps need every array global; a process-local one (e.g. an
  optimizer's step counter made on device 0) would be refused. Single process: unchanged.
  """
  if not is_multiprocess() or (mesh is None and shardings is None):
    return tree
  if shardings is None:
    shardings = NamedSharding(mesh, P())

  def one(x: Any, sharding: NamedSharding) -> Any:
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
      return x  # already global
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      data = np.asarray(jax.random.key_data(x))
      raw = jax.make_array_from_callback(data.shape, sharding, lambda idx: data[idx])
      return jax.random.wrap_key_data(raw, impl=jax.random.key_impl(x))
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])

  if isinstance(shardings, jax.sharding.Sharding):
    return jax.tree.map(lambda x: one(x, shardings), tree)
  return jax.tree.map(one, tree, shardings)


@dataclasses.dataclass(frozen=True)
class ProcessShare:
  """One process's part of a batch of prompts drawn identically on every process, and the moves between
  that part and the whole batch, written once for both cases: in a multi-process run (a ``mesh`` over
  several hosts) each process rolls out and grades its own :func:`process_slice` of the prompts and the
  rows meet in global arrays; in a single process every method below is the identity, so the
  single-host run keeps its exact arrays and programs.

  Attributes:
    mesh: the run's mesh, or None.
    prompts: the prompts of one batch (``rl.prompts_per_step``).
    rows_per_prompt: rows sampled per prompt (n).
    field: the config field ``prompts`` comes from, for the error.
  Raises:
    ConfigError: (at construction, in a multi-process run) ``prompts`` is not a multiple of the processes.
  """

  mesh: Mesh | None
  prompts: int
  rows_per_prompt: int = 1
  field: str = "rl.prompts_per_step"

  def __post_init__(self) -> None:
    share = process_slice(self.prompts, field=self.field) if self.multi else slice(0, self.prompts)
    object.__setattr__(self, "_share", share)

  @property
  def multi(self) -> bool:
    """Whether the batch spans several processes."""
    return self.mesh is not None and is_multiprocess()

  def own_prompts(self, rows: Sequence[int] | np.ndarray) -> Any:
    """This process's part of the batch's prompt ``rows`` (all of them in one process)."""
    return rows[self._share] if self.multi else rows[:]

  def own_rows(self, host_rows: np.ndarray) -> np.ndarray:
    """This process's rows of a whole batch's host array (``rows_per_prompt`` rows per own prompt)."""
    if not self.multi:
      return host_rows
    n = self.rows_per_prompt
    return host_rows[self._share.start * n:self._share.stop * n]

  def to_batch(self, local: Any) -> Any:
    """The whole batch as global arrays from this process's rows (a tree): ``local`` itself in one process."""
    return global_batch(local, self.mesh) if self.multi else local

  def all_rows(self, local: Any) -> Any:
    """Every row of the batch on the host from this process's rows (a tree): ``local`` itself in one process."""
    return to_host(global_batch(local, self.mesh)) if self.multi else local

  def replicate(self, tree: Any) -> Any:
    """Values equal on every process as global arrays (:func:`to_global`; unchanged in one process)."""
    return to_global(tree, self.mesh)


def sync_processes(name: str) -> None:
  """A barrier across the processes of a multi-host run (no-op in one process); every process must
  reach it, in the same order."""
  if is_multiprocess():
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(name)
