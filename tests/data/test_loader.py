"""daca_jax.data.loader: the job's batches as a grain pipeline, shared out by process, resumed from its state."""
from __future__ import annotations

import numpy as np
import pytest

from daca_jax.data import loader
from daca_jax.errors import DataError
from daca_jax.parallel import process_slice
from daca_jax.run.rl_loop import rl_prompt_rows
from daca_jax.run.sft_loop import sft_rows
from daca_jax.run.streams import SFT_STREAM
from daca_jax.config.rl import RLConfig

ROWS = np.arange(50 * 3).reshape(50, 3)


def test_each_step_is_the_seeds_draw_of_the_rows():
  draw = lambda step: sft_rows(7, step, 8, len(ROWS))
  ds = loader.step_batches(ROWS, draw, 20)
  assert len(ds) == 20
  for step in (0, 5, 19):
    batch = ds[step]
    want = np.random.default_rng([7, SFT_STREAM, step]).integers(0, 50, 8)
    np.testing.assert_array_equal(batch.index, want)
    np.testing.assert_array_equal(batch.rows, ROWS[want])
    assert batch.step == step
  # A sequence of items (RL's examples) is gathered item by item, in the drawn order.
  items = [f"ex{i}" for i in range(50)]
  rl = RLConfig(prompts_per_step=4, steps=3)
  ds = loader.step_batches(items, lambda s: rl_prompt_rows(1, rl, s, 50), 3)
  assert ds[2].rows == [items[i] for i in rl_prompt_rows(1, rl, 2, 50)]


def test_processes_share_out_each_batch_in_order():
  draw = lambda step: sft_rows(3, step, 8, len(ROWS))
  whole = loader.step_batches(ROWS, draw, 5)
  shares = [loader.step_batches(ROWS, draw, 5, own=lambda idx, i=i: idx[process_slice(len(idx), i, 4)])
            for i in range(4)]
  for step in range(5):
    parts = [s[step].rows for s in shares]
    assert all(len(p) == 2 for p in parts)
    np.testing.assert_array_equal(np.concatenate(parts), whole[step].rows)


def test_a_resumed_iterator_reads_what_the_uninterrupted_one_read():
  ds = loader.step_batches(ROWS, lambda step: sft_rows(0, step, 4, len(ROWS)), 12)
  straight = [b.index for b in loader.batch_iterator(ds, 0)]
  assert len(straight) == 12
  first = loader.batch_iterator(ds, 0)
  for _ in range(5):
    next(first)
  state = loader.iterator_state(first)
  assert state == {"next_index": 5}
  resumed = [b.index for b in loader.batch_iterator(ds, 5, state)]
  for a, b in zip(straight[5:], resumed, strict=True):
    np.testing.assert_array_equal(a, b)
  # A checkpoint written before the state was kept resumes at its step.
  np.testing.assert_array_equal(next(loader.batch_iterator(ds, 5)).index, straight[5])


def test_a_state_that_disagrees_with_the_models_step_is_refused():
  ds = loader.step_batches(ROWS, lambda step: sft_rows(0, step, 4, len(ROWS)), 12)
  with pytest.raises(DataError, match=r"rl/6: the data iterator's saved state \{'next_index': 4\} is not at step 6"):
    loader.batch_iterator(ds, 6, {"next_index": 4}, where="rl/6")
  with pytest.raises(DataError, match="is not at step 6"):
    loader.batch_iterator(ds, 6, ["next_index", 6], where="rl/6")
