"""Policy-gradient fidelity study: every estimator x credit against the exact gradient of the
sampler's expected reward, on a toy whose completions can be enumerated (daca_jax.studies.gradient_study).

  python experiments/gradient_study.py --workdir=runs/gradient_study [--num_batches=32] [--estimators=elbo,...]

Writes ``gradient_study.json`` (every number), ``gradient_study.md`` (tables) and
``gradient_study.png`` (batch agreement and cosine to the true gradient vs rollouts);
``--table_from=gradient_study.json [--study=regularised]`` prints the tables of a results file (the
README's come from ``docs/results/gradient_study.json``); with ``--study``, ``--table_only`` prints that
study's table alone (no header, no heading) and ``--by_estimator`` one row per estimator with each
credit side by side (the regularised study).
"""
import pathlib

from absl import flags, logging

from daca_jax.errors import ConfigError
from daca_jax.run import cli_errors
from daca_jax.run.cli_errors import reported_errors
from daca_jax.studies import gradient_study as gs
from daca_jax.io_utils import atomic_write_json, atomic_write_text, check_dir_path, read_json
from daca_jax.tasks.tokenizer import ByteTokenizer
from daca_jax.config.model import ModelConfig

_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")
_BATCHES = flags.DEFINE_integer("num_batches", 32, "Independent rollout batches per arm.")
_GROUP = flags.DEFINE_integer("group_size", 8, "G rollouts per prompt.")
_LENGTH = flags.DEFINE_integer("length", 4, "L: completion length (V^L completions are enumerated).")
_PROMPTS = flags.DEFINE_integer("num_prompts", 8, "Prompts of the toy (the batch is prompts x G).")
_TRAIN_STEPS = flags.DEFINE_integer("train_steps", 100, "SFT steps of the toy model (a partial solver).")
_BETA = flags.DEFINE_float("beta", 0.04, "KL coefficient of the regularised comparison.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed.", **cli_errors.SEED_BOUNDS)
_TABLE_FROM = flags.DEFINE_string("table_from", None, "Print the tables of this gradient_study.json and exit.")
_ESTIMATORS = flags.DEFINE_list("estimators", [], "Only the arms of these estimator labels (e.g. "
                                "'coupled,coupled (summed)'); empty: every arm.")
_STUDY = flags.DEFINE_string("study", "", "With --table_from: only this study (low_confidence, random, "
                             "regularised).")
_TABLE_ONLY = flags.DEFINE_bool("table_only", False, "With --table_from and --study: the study's table alone.")
_BY_ESTIMATOR = flags.DEFINE_bool("by_estimator", False, "With --table_from and --study: one row per estimator, "
                                  "each credit side by side.")


def _tables(out, only: str = "") -> str:
  n = out["studies"]["low_confidence"]["batch_rollouts"]
  md = [gs.report_header(out)]
  for name, res in out["studies"].items():
    if not only or name == only:
      md += [f"\n### {name}\n", gs.markdown_table(res, at_rollouts=4 * n)]
  return "\n".join(md)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  with reported_errors():  # a bad flag value: `error: <one line>`
    _run()


def _run():
  if _TABLE_FROM.value:
    out = read_json(_TABLE_FROM.value, fix="give a gradient_study.json this script wrote (--table_from)")
    if not isinstance(out.get("studies"), dict) or "low_confidence" not in out["studies"]:
      raise ConfigError("--table_from", _TABLE_FROM.value, "a gradient_study.json (an object with 'studies', "
                        "'low_confidence' among them)")
    if _STUDY.value and _STUDY.value not in out["studies"]:
      raise ConfigError("--study", _STUDY.value, f"one of the file's studies {sorted(out['studies'])}")
    if (_TABLE_ONLY.value or _BY_ESTIMATOR.value) and not _STUDY.value:
      raise ConfigError("--study", "", "a study of the file with --table_only / --by_estimator")
    if _BY_ESTIMATOR.value:
      print(gs.by_estimator_table(out["studies"][_STUDY.value]))
    elif _TABLE_ONLY.value:
      print(gs.markdown_table(out["studies"][_STUDY.value],
                              at_rollouts=4 * out["studies"]["low_confidence"]["batch_rollouts"]))
    else:
      print(_tables(out, _STUDY.value))
    return
  if _WORKDIR.value is None:
    raise ConfigError("--workdir", None, "an output directory (or --table_from)")
  check_dir_path(_WORKDIR.value, "--workdir")  # a bad path or arm label: refused before the toy model is trained
  task = gs.SortTask(length=_LENGTH.value, num_prompts=_PROMPTS.value, seed=_SEED.value)
  arms = gs.default_arms(task.length)
  if _ESTIMATORS.value:
    unknown = sorted(set(_ESTIMATORS.value) - {a.name for a in arms})
    if unknown:
      raise ConfigError("--estimators", ",".join(unknown), f"arm labels of {sorted({a.name for a in arms})}")
    arms = [a for a in arms if a.name in _ESTIMATORS.value]
  work = pathlib.Path(_WORKDIR.value)
  work.mkdir(parents=True, exist_ok=True)
  tok = ByteTokenizer()
  model = ModelConfig(vocab_size=260, d_model=32, n_layers=2, n_heads=2, mlp_dim=64)
  logits_fn, hidden_fn, params = gs.train_toy_model(model, task, tok, _TRAIN_STEPS.value, seed=_SEED.value)
  out = {"task": vars(task) | {"alphabet": task.alphabet}, "train_steps": _TRAIN_STEPS.value, "studies": {}}
  for remasking in ("low_confidence", "random"):
    print(f"== {remasking} remasking")
    out["studies"][remasking] = gs.run_study(arms, logits_fn, hidden_fn, params, task, remasking=remasking,
                                             group_size=_GROUP.value, num_batches=_BATCHES.value,
                                             seed=_SEED.value, log=print)
  # Away from the reference (θ moved up the true gradient), with the KL term of the objective.
  moved = gs.ascend_true_gradient(logits_fn, params, task, steps=20, lr=3e-3, remasking="low_confidence")
  kl_arms = [a for a in arms if a.credit in ("uniform", "dps")]
  print(f"== KL-regularised (beta={_BETA.value}), theta 20 ascent steps from the reference")
  out["studies"]["regularised"] = gs.run_study(kl_arms, logits_fn, hidden_fn, moved, task,
                                               remasking="low_confidence", group_size=_GROUP.value,
                                               num_batches=_BATCHES.value, seed=_SEED.value,
                                               beta=_BETA.value, ref_params=params, log=print)
  atomic_write_json(work / "gradient_study.json", out)
  md = _tables(out)
  atomic_write_text(work / "gradient_study.md", md + "\n")
  gs.plot(out["studies"]["low_confidence"], work / "gradient_study.png")
  print(md)


if __name__ == "__main__":
  cli_errors.run(main)  # a bad flag: `error: <one line>`, exit 2
