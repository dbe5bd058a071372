"""Denoising-trajectory pictures of a run's checkpoint (logic: :mod:`daca_jax.viz`).

  python experiments/visualize.py --workdir=runs/sudoku --output_dir=runs/sudoku/viz \
      [--num_prompts=3] [--credits=dps,dtca,delta] [--phase=rl] [--seed=0]
  # a random model of a config (plumbing check):
  python experiments/visualize.py --random_init --config=configs/sudoku_tiny.py:smoke --output_dir=/tmp/viz

For the first ``--num_prompts`` evaluation prompts, one rollout group each (``rl.group_size``
completions, the run's rollout settings) is drawn by the run's own learner and written as
``OUTPUT_DIR/trajectories.png`` and ``OUTPUT_DIR/trajectories.html`` (self-contained; hover a cell for
its numbers).
"""


from absl import flags, logging
from ml_collections import config_flags

from daca_jax.run import cli_errors
from daca_jax.run.cli_errors import reported_errors
from daca_jax.errors import ConfigError
from daca_jax.run.visualize import visualize_checkpoint

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file for --random_init (configs/*.py[:preset]).")
_WORKDIR = flags.DEFINE_string("workdir", "", "Workdir of experiments/train.py to draw.")
_PHASE = flags.DEFINE_enum("phase", "latest", ["latest", "rl", "sft"], "Which workdir checkpoint.")
_RANDOM = flags.DEFINE_bool("random_init", False, "Draw a randomly initialised model of --config.")
_NUM = flags.DEFINE_integer("num_prompts", 2, "Evaluation prompts to draw (one rollout group each).")
_CREDITS = flags.DEFINE_list("credits", [], "Credit weights to draw (default: dps and the run's own credit).")
_SEED = flags.DEFINE_integer("seed", 0, "Rollout PRNG seed.", **cli_errors.SEED_BOUNDS)
_DPI = flags.DEFINE_integer("dpi", 110, "Resolution of the PNG.")
_OUT = flags.DEFINE_string("output_dir", None, "Where trajectories.png / trajectories.html go.")
flags.mark_flags_as_required(["output_dir"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  with reported_errors():
    if _RANDOM.value and _CONFIG.value is None:
      raise ConfigError("--config", None, "a config file (configs/*.py[:preset]) with --random_init")
    paths = visualize_checkpoint(workdir=_WORKDIR.value, phase=_PHASE.value,
                                 random_init=_CONFIG.value if _RANDOM.value else None,
                                 num_prompts=_NUM.value, credits=_CREDITS.value, seed=_SEED.value,
                                 output_dir=_OUT.value, dpi=_DPI.value)
    for p in paths:
      print(f"wrote {p}")


if __name__ == "__main__":
  cli_errors.run(main)  # a bad flag: `error: <one line>`, exit 2
