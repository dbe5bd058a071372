"""Data: the benchmark files and the job's batches.

* :mod:`daca_jax.data.local` finds the data directory (``$DACA_DATA_DIR``, else ``../shared/data``
  beside the repository) and parses the benchmark files (d1's Sudoku CSV, JSON Lines, JSON arrays,
  schema folders) with the standard library.
* :mod:`daca_jax.data.catalog` lists the benchmark files; :mod:`daca_jax.data.sources` is what the tasks
  read them through (the local files, or the TFDS datasets :mod:`daca_jax.data.tfds_builders` builds
  from them; ``[tfds]`` extra).
* :mod:`daca_jax.data.loader`: each training phase's batches as a grain pipeline, this process's share of
  each, with a checkpointable position (``[run]`` extra).

The package sits below :mod:`daca_jax.tasks`: the tasks import it, and it imports no task.
"""
from daca_jax.data.local import (DATA_DIR_ENV, default_data_dir, read_json_records, read_sudoku_csv,
                                 resolve_data_dir)

__all__ = ["DATA_DIR_ENV", "default_data_dir", "read_json_records", "read_sudoku_csv", "resolve_data_dir"]
