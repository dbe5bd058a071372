"""Compare runs: overlaid reward / KL / evaluation curves and a table of final metrics (logic:
:mod:`daca_jax.reports.compare`).

  python experiments/compare.py runs/dps_s0 runs/dps_s1 runs/uniform_s0 runs/uniform_s1 [--output=cmp.png]
  python experiments/compare.py runs/grid          # a reproduce grid: one group per task/base/arm

Runs whose names differ only by a seed suffix (``_s0``, ``-seed1``) form one group, drawn as its mean
with a min–max band; the table's last columns are each group minus the first, paired by seed.
"""


from absl import flags

from daca_jax.run import cli_errors
from daca_jax.run.cli_errors import reported_errors
from daca_jax.reports.compare import compare
from daca_jax.errors import ConfigError
from daca_jax.io_utils import check_file_path

_OUTPUT = flags.DEFINE_string("output", "compare.png", "Where the curves go (PNG); '' for none.")


def main(argv):
  with reported_errors():
    paths = argv[1:]
    if not paths:
      raise ConfigError("runs", None, "one or more workdirs or reproduce grids: compare.py runs/a runs/b ...")
    if _OUTPUT.value:
      check_file_path(_OUTPUT.value, "--output")  # drawn after the runs are read: checked first
    print(compare(paths, _OUTPUT.value or None))
    if _OUTPUT.value:
      print(f"Curves written to {_OUTPUT.value}")


if __name__ == "__main__":
  cli_errors.run(main)  # a bad flag: `error: <one line>`, exit 2
