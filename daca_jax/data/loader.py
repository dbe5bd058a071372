"""The job's batches as a grain pipeline over its rows, from either data source.

A phase's batches are one ``grain.MapDataset`` over its steps: element ``step`` is the rows
``draw(step)`` picks (the run's seeded draw: a pure function of the seed and the step, so shuffling
with the seed and batching are the draw), this process's share of them (``own``), gathered from the
rows. The rows are what the task made of its benchmark records, local files or TFDS alike
(:mod:`daca_jax.data.sources`), so both sources give the same batches. The iterator's state
(``{"next_index": step}``) goes into each checkpoint's metadata and is restored on resume
(:func:`batch_iterator`); a resumed run reads the batches the uninterrupted run read.

Needs ``grain`` (the ``[run]`` extra).
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, NamedTuple, Sequence

import grain
import numpy as np

from daca_jax.errors import DataError

STATE_KEY = "data"  # the iterator's state in a checkpoint's metadata


class StepBatch(NamedTuple):
  """One step's batch.

  Attributes:
    step: the step it belongs to.
    index: int64 [b]: the rows' indices in the phase's rows (this process's share).
    rows: the rows themselves: ``rows[index]`` of an array, or a list of the items.
  """

  step: int
  index: np.ndarray
  rows: Any


def step_batches(rows: np.ndarray | Sequence[Any], draw: Callable[[int], np.ndarray], num_steps: int,
                 own: Callable[[np.ndarray], np.ndarray] | None = None) -> grain.MapDataset:
  """The phase's batches: element ``step`` (``0 <= step < num_steps``) is a :class:`StepBatch`.

  Args:
    rows: the phase's rows: an array (``[N, ...]``, gathered with one index) or a sequence of items.
    draw: ``step -> int [B]`` indices into ``rows``, the same on every process.
    num_steps: the phase's number of steps.
    own: ``indices -> this process's indices`` (its share of the batch); None: all of them.
  """
  def batch(step: int) -> StepBatch:
    index = np.asarray(draw(int(step)))
    if own is not None:
      index = np.asarray(own(index))
    picked = rows[index] if isinstance(rows, np.ndarray) else [rows[i] for i in index]
    return StepBatch(int(step), index, picked)

  return grain.MapDataset.range(num_steps).map(batch)


def batch_iterator(dataset: grain.MapDataset, start: int, state: dict[str, Any] | None = None,
                   where: str = "") -> Iterator[StepBatch]:
  """An iterator over ``dataset`` from step ``start``, restored from a checkpoint's ``state`` when given.

  Elements are read one at a time (no prefetch threads): each is used once, right away.

  Args:
    dataset: :func:`step_batches`' dataset.
    start: the step the phase resumes at (0: a fresh run).
    state: the iterator state saved with the checkpoint of ``start`` (its metadata's ``STATE_KEY``), or
      None for a checkpoint written before the state was saved (the position is then ``start`` itself).
    where: the checkpoint, for the error.

  Raises:
    DataError: a saved state that is not at ``start`` (a checkpoint whose data position and model step
      disagree, e.g. written by another pipeline).
  """
  it = iter(dataset.to_iter_dataset(read_options=grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)))
  if state is not None:
    if not isinstance(state, dict) or state.get("next_index") != start:
      raise DataError(f"{where}: the data iterator's saved state {state!r} is not at step {start}, the step "
                      "of the model it was saved with (use a new --workdir)")
    it.set_state(state)
  elif start:
    it.set_state({"next_index": start})
  return it


def iterator_state(it: Iterator[StepBatch]) -> dict[str, Any]:
  """The state to save with a checkpoint (JSON: ``{"next_index": step}``)."""
  return dict(it.get_state())
