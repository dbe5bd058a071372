"""d1's evaluation protocol for any task and any checkpoint (logic: :mod:`daca_jax.evaluation`).

  # a workdir of experiments/train.py (its latest RL, else SFT, checkpoint):
  python experiments/evaluate.py --workdir=runs/sudoku --tasks=sudoku4x4 --output_dir=runs/sudoku/eval \
      --gen_lengths=32 --block_length=32
  # LLaDA-8B-Instruct from a local Hugging Face directory, d1's lengths 128/256/512:
  python experiments/evaluate.py --hf_checkpoint=/ckpt/LLaDA-8B-Instruct \
      --tasks=gsm8k,math500,countdown,sudoku4x4 --output_dir=runs/llada_eval --batch_size=16
  # a random model (smoke test):
  python experiments/evaluate.py --random_init --config=configs/sudoku_tiny.py:smoke \
      --tasks=sudoku4x4,countdown --gen_lengths=32 --num_examples=8 --output_dir=/tmp/eval_smoke

Writes ``OUTPUT_DIR/<task>/gen<L>.jsonl`` (appended per batch), ``summary.json`` and ``summary.md``;
running the same command again resumes where an interrupted run stopped.
"""


from absl import flags, logging
from ml_collections import config_flags

from daca_jax.run import cli_errors
from daca_jax.run.cli_errors import reported_errors
from daca_jax.errors import ConfigError
from daca_jax.io_utils import check_dir_path
from daca_jax.evaluation import D1_BLOCK_LENGTH, D1_GEN_LENGTHS, EvalProtocol, run_evaluation
from daca_jax.run.eval_models import load_model
from daca_jax.config.configure import train_config_from_dict

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file for --random_init (configs/*.py[:preset]).")
_WORKDIR = flags.DEFINE_string("workdir", "", "Workdir of experiments/train.py to evaluate.")
_PHASE = flags.DEFINE_enum("phase", "latest", ["latest", "rl", "sft"], "Which workdir checkpoint.")
_HF = flags.DEFINE_string("hf_checkpoint", "", "Local Hugging Face LLaDA/Dream checkpoint directory.")
_HF_DTYPE = flags.DEFINE_enum("hf_dtype", "bfloat16", ["bfloat16", "float32"], "HF params/compute dtype.")
_RANDOM = flags.DEFINE_bool("random_init", False, "Evaluate a randomly initialised model of --config.")
_TOKENIZER = flags.DEFINE_string("tokenizer", "", "tokenizer.json (or folder) replacing the tasks' tokenizer.")
_PROMPT_STYLE = flags.DEFINE_string("prompt_style", "", "Override task.options.prompt_style (plain|chat).")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "Benchmark data folder (default: the checkpoint's).")
_TFDS_DIR = flags.DEFINE_string("tfds_dir", "", "Read the benchmarks from the TFDS datasets built in this folder "
                                "(experiments/build_tfds.py) instead (default: the run's source).")
_TASKS = flags.DEFINE_list("tasks", [], "Tasks to evaluate (default: the config's task).")
_LENGTHS = flags.DEFINE_list("gen_lengths", [str(x) for x in D1_GEN_LENGTHS], "Generation lengths.")
_BLOCK = flags.DEFINE_integer("block_length", D1_BLOCK_LENGTH, "Semi-autoregressive block length.")
_STEPS = flags.DEFINE_integer("steps", 0, "Denoising steps; 0 = gen_length / 2 (d1).")
_TEMPERATURE = flags.DEFINE_float("temperature", 0.0, "Decoding temperature (0 = greedy, d1).")
_REMASKING = flags.DEFINE_string("remasking", "low_confidence", "low_confidence (d1) | random.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Prompts per decode call.")
_NUM = flags.DEFINE_integer("num_examples", 0, "Evaluate the first N examples of each task (0: all).")
_SEED = flags.DEFINE_integer("seed", 0, "PRNG seed (temperature > 0 / random remasking only).", **cli_errors.SEED_BOUNDS)
_OUT = flags.DEFINE_string("output_dir", None, "Where generations and summaries go.")
_MAX_BATCHES = flags.DEFINE_integer("max_batches", None, "Stop after this many new batches (resume later).")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show progress bars.")
flags.mark_flags_as_required(["output_dir"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  with reported_errors():  # bad input, a damaged checkpoint, a full/read-only disk: `error: <one line>`
    check_dir_path(_OUT.value, "--output_dir")  # before the model is loaded
    try:
      lengths = tuple(int(x) for x in _LENGTHS.value)
    except ValueError:
      raise ConfigError("--gen_lengths", ",".join(_LENGTHS.value), "comma-separated integers") from None
    if _RANDOM.value and _CONFIG.value is None:
      raise ConfigError("--config", None, "a config file (configs/*.py[:preset]) with --random_init")
    cfg = train_config_from_dict(_CONFIG.value) if _CONFIG.value is not None else None
    model = load_model(workdir=_WORKDIR.value, phase=_PHASE.value, hf_checkpoint=_HF.value,
                       random_init=cfg if _RANDOM.value else None, tokenizer=_TOKENIZER.value,
                       prompt_style=_PROMPT_STYLE.value, data_dir=_DATA_DIR.value, hf_dtype=_HF_DTYPE.value,
                       tfds_dir=_TFDS_DIR.value)
    tasks = _TASKS.value or list(model.task_options)
    protocol = EvalProtocol(gen_lengths=lengths, block_length=_BLOCK.value, steps=_STEPS.value,
                            temperature=_TEMPERATURE.value, remasking=_REMASKING.value,
                            batch_size=_BATCH.value, num_examples=_NUM.value, seed=_SEED.value)
    run_evaluation(model, tasks, protocol, _OUT.value, max_batches=_MAX_BATCHES.value,
                   show_progress=_PROGRESS.value)


if __name__ == "__main__":
  cli_errors.run(main)  # a bad flag: `error: <one line>`, exit 2
