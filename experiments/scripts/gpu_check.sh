#!/usr/bin/env bash
# LLaDA-8B size (random bf16 weights) on the GPU(s) at hand, one command, <= 8 minutes on one H200:
#  1. the rollout benchmark: tokens/s, MFU, memory and the fast-rollout figures (capped at 3m30s);
#  2. one whole RL iteration (experiments/iteration_check.py, capped at 4m20s): plan.py's prediction for
#     this device compiled with the GPU's own compiler, then the rollout, the likelihood passes and one
#     update run for real (LoRA r 128 when full fine-tuning does not fit one device), measured MFU and
#     allocator peak printed next to the predicted ones.
#
#   bash experiments/scripts/gpu_check.sh [extra benchmark flags, e.g. --peak_tflops=989]
#   GPU_CHECK_DEVICE=h100 bash experiments/scripts/gpu_check.sh    # prediction for an H100 (default h200)
#   GPU_CHECK_SIZE=tiny bash experiments/scripts/gpu_check.sh      # CPU, tiny model: the same logic
#
# Geometry: d1's setting (gen length 256, block 32) with 64 steps in the benchmark and 128 in the
# iteration, G 8 sequences per device of a 64-token prompt. Writes ${OUT:-/tmp}/gpu_check.json and
# ${OUT:-/tmp}/iteration_check.json. Not yet run on a GPU: only the tiny CPU path has been exercised
# (tests/planning/test_plan.py, tests/run/test_benchmark.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
out_dir="${OUT:-/tmp}"
mkdir -p "${out_dir}"
device="${GPU_CHECK_DEVICE:-h200}"
# The plan compiles the iteration's programs once from shapes; with the persistent cache the real run
# reuses those executables instead of compiling them again.
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-/tmp/daca_jax_xla_cache}"
if [[ "${GPU_CHECK_SIZE:-8b}" == "tiny" ]]; then
  bench=(--model=llada_8b --shrink --batch=2 --prompt_len=8 --gen_length=16 --block_length=8 --steps=4)
  iteration=(--model=tiny --layers=1 --prompt_len=4 --gen_length=8 --block_length=8 --steps=2 --group_size=2)
  fast=plain,prefix
else
  python -c "import jax; d = jax.devices()[0]; print('device:', d.platform, d.device_kind); \
assert d.platform == 'gpu', 'gpu_check.sh needs a GPU (jax[cuda]); GPU_CHECK_SIZE=tiny runs the CPU path'"
  bench=(--model=llada_8b --batch=8 --prompt_len=64 --gen_length=256 --block_length=32 --steps=64)
  iteration=(--model=llada_8b --prompt_len=64 --gen_length=256 --block_length=32 --steps=128 --group_size=8)
  fast=plain,prefix,dual,threshold+dual
fi
timeout 210 python experiments/benchmark.py "${bench[@]}" --sections=rollout,fast --repeats=1 \
  --fast_variants="${fast}" --json="${out_dir}/gpu_check.json" "$@"
timeout 260 python experiments/iteration_check.py "${iteration[@]}" --device="${device}" \
  --json="${out_dir}/iteration_check.json"
