"""The local-file loaders now live in :mod:`daca_jax.local_data` (the tasks read the benchmark files
and ``data/`` builds TFDS datasets from the tasks, so the loaders sit below both); this module keeps
the old import path.
"""
from daca_jax.local_data import (DATA_DIR_ENV, default_data_dir, read_json_records,  # noqa: F401
                                 read_sudoku_csv, resolve_data_dir)
