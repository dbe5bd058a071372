"""Main job: SFT warm start → eval → GRPO (DACA-GRPO by default) → eval.

  python experiments/train.py --config=configs/sudoku_tiny.py --workdir=runs/sudoku [--config.a.b=v]

Writes ``WORKDIR/results.json``, ``metrics.jsonl``, ``reward_curve.png`` and checkpoints; running the
same command again resumes (or reuses) what is already there. On SIGTERM (preemption, a time limit) it
saves the checkpoint of the current SFT/RL step and exits with status 75, "rerun me"
(:mod:`daca_jax.run.preemption`); exit statuses 1-3 are errors (:mod:`daca_jax.run.cli_errors`).
"""
import pathlib as _pathlib
import sys

_ROOT = _pathlib.Path(__file__).resolve().parents[1]
if __name__ == "__main__" and any(a.lstrip("-").startswith("target") for a in sys.argv[1:]):
  from daca_jax.planning.simulate import simulate_devices

  simulate_devices(sys.argv)  # the target's compiler (or cpu:N devices), set up before jax is imported

from absl import flags, logging
from ml_collections import config_flags

from daca_jax import parallel
from daca_jax.run import preemption
from daca_jax.run import cli_errors
from daca_jax.run.cli_errors import reported_errors
from daca_jax.run.pipeline import run_main_job
from daca_jax.run.presets import presets_help
from daca_jax.config.configure import train_config_from_dict
from daca_jax.io_utils import check_workdir_path

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (configs/*.py[:preset]).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (checkpoints, metrics, results).")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show progress bars.")
_COMPILE_ONLY = flags.DEFINE_bool("compile_only", False, "Preflight: compile the run's rollout and update for "
                                  "--target (before any weight is read), print whether they fit, exit 0 if they "
                                  "do and 1 with one line if they do not; write the executables to "
                                  "WORKDIR/executables, which the run on a matching machine loads.")
_TARGET = flags.DEFINE_string("target", None, "With --compile_only: the machine (tpu:v5p-8, gpu:h100x8, cpu:N, ...; "
                              "daca_jax/planning/targets.py).")
_USABLE = flags.DEFINE_float("usable_fraction", 0.9, "With --compile_only: the share of a device's memory the run "
                             "may use.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # keep JAX's backend-probing INFO lines out of the output
  with reported_errors():  # bad input, a diverging run, a full/read-only disk: `error: <one line>`
    check_workdir_path(_WORKDIR.value, "--workdir")  # '' would write the run into the current directory
    if _COMPILE_ONLY.value or _TARGET.value:
      _preflight()
      return
    cfg = train_config_from_dict(_CONFIG.value)
    parallel.maybe_initialize(cfg.parallel)  # multi-host: before anything touches a device
    with preemption.watching():  # SIGTERM: checkpoint at the next step, `preempted: <line>`, exit 75
      run_main_job(cfg, _WORKDIR.value, show_progress=_PROGRESS.value)


def _preflight():
  from daca_jax.errors import ConfigError
  from daca_jax.planning import targets
  from daca_jax.planning.preflight import preflight

  if not (_COMPILE_ONLY.value and _TARGET.value):
    raise ConfigError("--target" if _COMPILE_ONLY.value else "--compile_only",
                      _TARGET.value if _COMPILE_ONLY.value else False,
                      "given together: --compile_only --target=<machine> (a preflight)")
  if not 0 < _USABLE.value <= 1:
    raise ConfigError("--usable_fraction", _USABLE.value, "a fraction in (0, 1]")
  targets.check_process(_TARGET.value)
  target = targets.target(_TARGET.value)
  result, _ = preflight(_CONFIG.value, target, usable_fraction=_USABLE.value,
                        executables_dir=check_workdir_path(_WORKDIR.value, "--workdir") / "executables")
  print(result.line)


if __name__ == "__main__":
  if any(a.split("=")[0].lstrip("-") in ("help", "helpshort", "helpfull", "h", "?") for a in sys.argv[1:]):
    __doc__ = f"{__doc__}\n{presets_help(_ROOT / 'configs')}\n"  # absl's usage() prints the module doc
  cli_errors.run(main)  # a bad flag, --config file or override: `error: <one line>`, exit 2
