"""Real-task estimator alignment: each likelihood's GRPO update against the sampler's own trajectory
policy gradient, on the same rollout batches from the SFT warm start (daca_jax.studies.alignment_study).

  python experiments/alignment_study.py --config=configs/sudoku_tiny.py --workdir=runs/alignment \
      [--sft_dir=runs/credit_study/sft_cache/sudoku4x4_seed0] [--num_batches=16] [--preset=study]

Writes ``alignment.json`` and ``alignment.md``; ``--table_from=a.json,b.json`` prints the table of
results files, one value per file in each cell (the README's: ``docs/results/alignment_sudoku_seed*.json``).

``--measure=credit`` compares the credit assigners' per-token advantages with the task's own per-cell
credit on the same batches instead (daca_jax.studies.credit_alignment): ``credit_alignment.json`` / ``.md``.
"""

import pathlib

from absl import flags, logging
from ml_collections import config_flags

from daca_jax.studies import alignment_study as al
from daca_jax.studies import credit_alignment as ca
from daca_jax.run import cli_errors
from daca_jax.run.cli_errors import reported_errors
from daca_jax.errors import ConfigError
from daca_jax.io_utils import atomic_write_json, atomic_write_text, check_dir_path, read_json
from daca_jax.reports.reproduce import PRESETS
from daca_jax.config.configure import train_config_from_dict

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (configs/*.py[:preset]).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")
_SFT_DIR = flags.DEFINE_string("sft_dir", None, "SFT warm start to reuse or train (default WORKDIR/sft).")
_BATCHES = flags.DEFINE_integer("num_batches", 16, "Independent rollout batches.")
_PRESET = flags.DEFINE_enum("preset", "study", sorted(PRESETS), "Batch size of the reproduce preset "
                             "(study: the committed results' 32 prompts × 4).")
_MEASURE = flags.DEFINE_enum("measure", "gradients", ["gradients", "credit"],
                             "gradients: estimators vs the trajectory gradient; credit: assigners vs per-cell credit.")
_MASKS = flags.DEFINE_bool("mask_agreement", False, "Also differentiate each batch under a second likelihood "
                            "key (gradient measure; doubles its passes).")
_TABLE_FROM = flags.DEFINE_list("table_from", None, "Print the table of these alignment.json files and exit.")


def _table(results) -> str:
  results = results if isinstance(results, list) else [results]
  r = results[0]
  rewards = " / ".join(f"{x['reward_mean']:.3f}" for x in results)
  if "oracle_cos" in next(iter(r["arms"].values())):
    return (f"{r['num_batches']} batches of {r['batch_rollouts']} rollouts from the SFT warm start "
            f"(mean reward {rewards}); oracle: the task's per-cell credit (token_reward).\n\n" + ca.markdown(results))
  return (f"{r['num_batches']} batches of {r['batch_rollouts']} rollouts from the SFT warm start "
          f"(mean reward {rewards}); reference: the first row.\n\n" + al.markdown(results))


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  with reported_errors():
    if _TABLE_FROM.value:
      print(_table([read_json(f, fix="give alignment.json / credit_alignment.json files this script wrote "
                                 "(--table_from)") for f in _TABLE_FROM.value]))
      return
    if not (_CONFIG.value and _WORKDIR.value):
      raise ConfigError("--config/--workdir", None, "both given (or --table_from)")
    check_dir_path(_WORKDIR.value, "--workdir")  # before the SFT warm start is trained
    if _SFT_DIR.value is not None:
      check_dir_path(_SFT_DIR.value, "--sft_dir")
    cfg = PRESETS[_PRESET.value](train_config_from_dict(_CONFIG.value))
    work = pathlib.Path(_WORKDIR.value)
    work.mkdir(parents=True, exist_ok=True)
    task, train, logits_fn, params = al.sft_warm_start(cfg, _SFT_DIR.value or work / "sft")
    if _MEASURE.value == "credit":
      res = ca.run_credit_alignment(cfg, logits_fn.graph, params, task, train, num_batches=_BATCHES.value,
                                    seed=cfg.seed)
      name = "credit_alignment"
    else:
      res = al.run_alignment(cfg, logits_fn, params, task, train, num_batches=_BATCHES.value, seed=cfg.seed,
                             mask_agreement=_MASKS.value)
      name = "alignment"
    atomic_write_json(work / f"{name}.json", res)
    md = _table(res)
    atomic_write_text(work / f"{name}.md", md + "\n")
    print(md)


if __name__ == "__main__":
  cli_errors.run(main)  # a bad flag: `error: <one line>`, exit 2
