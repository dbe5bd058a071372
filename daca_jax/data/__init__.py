"""Data: the benchmark files on the local disk, read for the tasks.

:mod:`daca_jax.data.local` finds the data directory (``$DACA_DATA_DIR``, else ``../shared/data``
beside the repository) and parses the benchmark files (d1's Sudoku CSV, JSON Lines, JSON arrays). The
package sits below :mod:`daca_jax.tasks`: the tasks import it, it imports no task, and it needs no
third-party package. Batches and their per-host shares are drawn by the main job
(:func:`daca_jax.parallel.process_slice`), not here.
"""
from daca_jax.data.local import (DATA_DIR_ENV, default_data_dir, read_json_records, read_sudoku_csv,
                                 resolve_data_dir)

__all__ = ["DATA_DIR_ENV", "default_data_dir", "read_json_records", "read_sudoku_csv", "resolve_data_dir"]
