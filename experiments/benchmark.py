"""Speed, FLOP utilisation and memory figures, measured in one run and printed side by side.

  python experiments/benchmark.py [--config=configs/sudoku_tiny.py] [--sections=rollout,fast,torch]
      [--batch=64] [--json=bench.json]
  # LLaDA-8B size, random bf16 weights (an accelerator; see experiments/scripts/gpu_check.sh):
  python experiments/benchmark.py --model=llada_8b --sections=rollout,fast --batch=8

Sections (``--sections``, comma separated; ``all`` adds the slow ``accuracy`` and ``rl_iteration``):
  rollout    rollout tokens/s, compile time, model FLOPs and MFU, peak memory, DPS overhead.
  profile    where a rollout step's time goes: the sampler (no records, and with DPS's step
             confidences) against the same number of bare model passes (transformer + output head
             over the completion) in one compiled scan, interleaved; the non-model share.
  fast       threshold decoding and prefix / dual K/V cache: tokens/s, model calls, agreement with
             plain greedy decoding.
  likelihood SML (K=4) vs mean-field per-token likelihood time; update step time, compiled peak
             memory and compile time; SML with strata_batch=1; mean-field on a 4x batch (the same
             model work as SML's four passes).
  memory     compiled scratch memory of SML at V=32k, all strata at once vs one at a time.
  peak8b     compiled peak memory of one rollout at LLaDA-8B width (D 4096, V 126464, bf16,
             ``--peak_layers`` layers), compiled from shapes only (no parameter is allocated):
             plain, recording DPS's step confidences, and with the dual K/V cache; d1's geometry
             (L 256, block 32, 128 steps) unless --gen_length/--block_length/--steps are given.
  scaling    rollout tokens/s vs L, SML time vs K, update time vs group size G.
  torch      the same rollout in eager PyTorch (transformers' Llama, bidirectional, same weights,
             LLaDA's loop); prints the JAX / PyTorch tokens/s ratio. Skipped if torch is missing.
  costs      every credit / likelihood method's cost from XLA's compiled FLOPs (rollout with its
             records, likelihood passes, update vs d1) and wall seconds: daca_jax.measure.method_costs.
  accuracy   Sudoku strict_solved of plain vs threshold vs cached decoding with an SFT'd tiny model
             (``--sft_dir`` to reuse a checkpoint folder, else a short SFT of ``--sft_steps``).
  rl_iteration  one RL iteration of the config's recipe (the training rollout of prompts_per_step x
             sample_group_size sequences at the rollout temperature, then credit and one update of the
             kept rows) with each training-rollout mode of ``--rl_modes``, from the SFT'd model (as
             ``accuracy``), interleaved: rollout, update and iteration seconds, model calls, and each
             mode's speed-up over d1's sampler (median of the per-round ratios, with their range).

Absolute times are only meaningful on an accelerator; ratios measured in the same run are what to
compare. MFU uses the device's dense bf16 peak (``--peak_tflops`` overrides; 'n/a' on CPU unless given).
"""

import dataclasses
import sys

from absl import flags, logging
from ml_collections import config_flags

from daca_jax.io_utils import check_file_path
from daca_jax.measure.bench import BenchOptions
from daca_jax.measure.bench_sections import DEFAULT_SECTIONS, SECTIONS, choose_sections, run_benchmark
from daca_jax.run import cli_errors

_D = BenchOptions()  # the flags' defaults
_CONFIG = config_flags.DEFINE_config_file("config", "configs/sudoku_tiny.py", "Config file.")
_SECTIONS = flags.DEFINE_string("sections", DEFAULT_SECTIONS,
                                f"Comma-separated sections of {list(SECTIONS)}, or 'all'.")
flags.DEFINE_enum("model", _D.model, ["config", "llada_8b"],
                  "'config': the config's model and task prompts; 'llada_8b': LLaDA-8B "
                  "geometry, random bf16 weights, random prompts (rollout/fast only).")
flags.DEFINE_bool("shrink", _D.shrink, "--model=llada_8b with d_model 64, 2 layers (the same code "
                  "path, CPU-sized: how tests check gpu_check.sh).")
flags.DEFINE_integer("batch", _D.batch, "Sequences per rollout / likelihood call.")
flags.DEFINE_integer("repeats", _D.repeats, "Timed repetitions (best is reported).")
flags.DEFINE_integer("prompt_len", _D.prompt_len, "Prompt tokens for --model=llada_8b.")
flags.DEFINE_integer("gen_length", _D.gen_length, "Override rollout.gen_length (0: config).")
flags.DEFINE_integer("block_length", _D.block_length, "Override rollout.block_length (0: config).")
flags.DEFINE_integer("steps", _D.steps, "Override rollout.steps (0: config).")
flags.DEFINE_float("threshold", _D.threshold, "Confidence threshold of the 'fast' section (Fast-dLLM).")
flags.DEFINE_integer("fast_block_length", _D.fast_block_length,
                     "Block length of the fast/accuracy cache runs (0: the rollout's; "
                     "a cache needs more than one block to matter).")
flags.DEFINE_string("fast_variants", _D.fast_variants,
                    "fast/accuracy: which variants to run (the plain baselines always run).")
flags.DEFINE_float("peak_tflops", _D.peak_tflops, "Peak TFLOP/s per chip for MFU (0: device table).")
flags.DEFINE_string("sft_dir", _D.sft_dir, "accuracy: an SFT checkpoint folder to reuse (copied).")
flags.DEFINE_integer("sft_steps", _D.sft_steps, "accuracy: SFT steps when --sft_dir is not given.")
flags.DEFINE_integer("eval_examples", _D.eval_examples, "accuracy: evaluation puzzles.")
flags.DEFINE_string("rl_modes", _D.rl_modes,
                    "rl_iteration: training-rollout modes, each 'plain' or '+'-joined parts of "
                    "prefix / dual (rollout.kv_cache) and threshold (rollout.threshold=--threshold).")
_JSON = flags.DEFINE_string("json", "", "Also write every figure to this JSON file.")
flags.DEFINE_integer("peak_layers", _D.peak_layers, "peak8b: transformer layers of the LLaDA-8B-width "
                     "model (the sampler's buffers do not depend on depth).")
flags.DEFINE_enum("remat", _D.remat, ["", "none", "full", "dots", "dots_saveable"],
                  "Override model.remat (per-layer rematerialisation) for every section.")


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  opts = BenchOptions(**{f.name: flags.FLAGS[f.name].value for f in dataclasses.fields(BenchOptions)})
  try:
    chosen = choose_sections(_SECTIONS.value, opts)
    if _JSON.value:
      check_file_path(_JSON.value, "--json")  # written at the end: a folder there is refused up front
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  run_benchmark(_CONFIG.value, opts, chosen, _JSON.value)


if __name__ == "__main__":
  cli_errors.run(main)  # a bad flag: `error: <one line>`, exit 2
