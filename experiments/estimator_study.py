"""Estimator study: bias, std, RMSE and gradient cosine of the likelihood estimators against
the exact any-order log-likelihood, on a briefly trained tiny model with completions of length 6.

  python experiments/estimator_study.py --workdir=runs/estimators [--draws=32] [--train_steps=300]
  python experiments/estimator_study.py --table_from=docs/results/estimator_study.json

Writes ``estimator_study.md`` (table), ``estimator_study.png`` and ``estimator_study.json``;
``--table_from`` prints the table of such a file (or of a results file holding its rows) and exits.
"""
import pathlib

import jax
import jax.numpy as jnp
from absl import flags, logging

from daca_jax.errors import ConfigError
from daca_jax.run import cli_errors
from daca_jax.run.cli_errors import reported_errors
from daca_jax.studies import estimator_study as es
from daca_jax.diffusion import make_rollout_fn
from daca_jax.io_utils import atomic_write_json, atomic_write_text, check_dir_path
from daca_jax.tasks.tokenizer import ByteTokenizer
from daca_jax.config.model import ModelConfig
from daca_jax.config.rollout import RolloutConfig

_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")
_DRAWS = flags.DEFINE_integer("draws", 32, "Mask draws per estimator.")
_TRAIN_STEPS = flags.DEFINE_integer("train_steps", 300, "SFT steps of the tiny model.")
_NUM_SEQ = flags.DEFINE_integer("num_sequences", 16, "Completions evaluated.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed.", **cli_errors.SEED_BOUNDS)
_TABLE_FROM = flags.DEFINE_string("table_from", None, "Print the table of this results file and exit.")
LENGTH = 6


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  with reported_errors():  # a bad flag value: `error: <one line>`
    _run()


def _run():
  if _TABLE_FROM.value:
    print(es.markdown_table(es.read_results(_TABLE_FROM.value)))
    return
  if _WORKDIR.value is None:
    raise ConfigError("--workdir", None, "an output directory (or --table_from)")
  check_dir_path(_WORKDIR.value, "--workdir")  # '' or a file: refused before the tiny model is trained
  work = pathlib.Path(_WORKDIR.value)
  work.mkdir(parents=True, exist_ok=True)
  tok = ByteTokenizer()
  model_cfg = ModelConfig(d_model=64, n_layers=2, n_heads=4, mlp_dim=192)
  prompts, targets = es.toy_examples(4000, _SEED.value)
  data = es.encode(tok, prompts, targets, LENGTH)
  p = 1 + 4
  logits_fn, params = es.train_tiny_model(model_cfg, data, p, _TRAIN_STEPS.value, _SEED.value)
  # Completions sampled from the trained model (temperature 1), as a rollout would produce them.
  sample = make_rollout_fn(logits_fn, RolloutConfig(LENGTH, LENGTH, LENGTH, 1.0), mask_id=tok.mask_id,
                           eos_id=tok.eos_id)
  test_prompts, _ = es.toy_examples(_NUM_SEQ.value, _SEED.value + 1)
  prompt_ids = jnp.asarray(es.encode(tok, test_prompts, [""] * _NUM_SEQ.value, 0))
  traj = sample(params, prompt_ids, jax.random.PRNGKey(_SEED.value))
  rows = es.study(logits_fn, params, traj.tokens, p, tok.mask_id, es.default_specs(LENGTH), _DRAWS.value,
                  _SEED.value, commit_step=traj.commit_step)
  table = es.markdown_table(rows)
  header = (f"Exact any-order log p(o) of {_NUM_SEQ.value} sampled completions (L = {LENGTH}), mean "
            f"{rows[0]['exact_mean']:.3f} nats; {_DRAWS.value} mask draws per estimator; tiny model "
            f"trained {_TRAIN_STEPS.value} SFT steps. Bias/std/RMSE in nats per sequence.\n\n")
  atomic_write_text(work / "estimator_study.md", header + table + "\n")
  atomic_write_json(work / "estimator_study.json", rows)
  es.plot(rows, str(work / "estimator_study.png"), title=f"Likelihood estimators vs exact (L = {LENGTH})")
  print(header + table)


if __name__ == "__main__":
  cli_errors.run(main)  # a bad flag: `error: <one line>`, exit 2
