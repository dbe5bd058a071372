#!/usr/bin/env bash
# Rollout benchmark at LLaDA-8B size (random bf16 weights) on one GPU; prints tokens/s, MFU, memory
# and the fast-rollout figures. Budget: <= 8 minutes on one H200 (the run is capped at 7m50s).
#
#   bash experiments/scripts/gpu_check.sh [extra benchmark flags, e.g. --peak_tflops=989]
#
# Geometry: d1's evaluation setting (gen length 256, block 32) with 64 steps (4 tokens per step) and
# 8 prompts of 64 tokens; temperature 1 for the rollout section, greedy for the fast section (the
# uncached threshold run is left out: with random weights nothing passes the threshold). Writes
# ${OUT:-/tmp}/gpu_check.json. The same code path runs on CPU at tiny size in
# tests/test_benchmark.py (--model=llada_8b --shrink).
set -euo pipefail
cd "$(dirname "$0")/../.."
out_dir="${OUT:-/tmp}"
mkdir -p "${out_dir}"
python -c "import jax; d = jax.devices()[0]; print('device:', d.platform, d.device_kind); \
assert d.platform == 'gpu', 'gpu_check.sh needs a GPU (jax[cuda])'"
timeout 470 python experiments/benchmark.py --model=llada_8b --sections=rollout,fast \
  --batch=8 --prompt_len=64 --gen_length=256 --block_length=32 --steps=64 --repeats=1 \
  --fast_variants=plain,prefix,dual,threshold+dual --json="${out_dir}/gpu_check.json" "$@"
