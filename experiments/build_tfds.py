"""Builds the benchmark files as TFDS datasets (ArrayRecord) for runs with ``--config.data.source=tfds``
(logic: :mod:`daca_jax.data.tfds_builders`; needs ``pip install -e '.[run,tfds]'``, not TensorFlow).

  # every benchmark dataset, from the default local folder ($DACA_DATA_DIR or ../shared/data):
  python experiments/build_tfds.py --tfds_dir=~/tensorflow_datasets
  # into a bucket folder (built in a local copy, then uploaded; the [gcs] extra), for the hosts of a pod:
  python experiments/build_tfds.py --tfds_dir=gs://my-bucket/tfds
  # two of them, from a given folder:
  python experiments/build_tfds.py --tfds_dir=/data/tfds --data_dir=/data/benchmarks \
      --datasets=daca_sudoku4x4_d1,daca_countdown_d1

A dataset already built is read back and checked against its files, not rebuilt (``--overwrite``
rebuilds it).
"""
from absl import flags

from daca_jax.data import catalog
from daca_jax.run import cli_errors
from daca_jax.run.cli_errors import reported_errors

_TFDS_DIR = flags.DEFINE_string("tfds_dir", None, "TFDS data directory to build into (data.tfds_dir).")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "Local benchmark folder (default: $DACA_DATA_DIR or ../shared/data).")
_DATASETS = flags.DEFINE_list("datasets", [], f"Datasets to build (default: all of {sorted(catalog.DATASETS)}).")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Rebuild datasets already built.")
flags.mark_flags_as_required(["tfds_dir"])


def main(argv):
  del argv
  with reported_errors():
    from daca_jax.io_utils import check_local_path, check_workdir_path
    check_workdir_path(_TFDS_DIR.value, "--tfds_dir")  # a folder written into; gs://: built locally, then uploaded
    check_local_path(_DATA_DIR.value, "--data_dir")
    from daca_jax.data import sources
    sources.require_tfds()  # one line, before TFDS's own import errors
    from daca_jax.data import tfds_builders
    tfds_builders.build(_DATASETS.value, _TFDS_DIR.value, _DATA_DIR.value, overwrite=_OVERWRITE.value)


if __name__ == "__main__":
  cli_errors.run(main)
