#!/usr/bin/env bash
# LLaDA-8B size on the GPU at hand, one command, about 8 minutes on one H200. Steps (GPU_CHECK_STEPS,
# default all three, in this order), each capped, a step past its cap reported and the next one run:
#  1. bench (cap 90 s; predicted ~60 s: two rollout compiles and runs of 8 x 320 tokens at 8B): the
#     rollout benchmark, tokens/s, MFU, memory and the fast-rollout figures;
#  2. iteration (cap 150 s; predicted ~120 s: the plan compiled with the GPU's own compiler, one
#     rollout, likelihood and update at 8B, LoRA r 128 when full fine-tuning does not fit):
#     experiments/iteration_check.py, measured MFU and allocator peak next to the predicted ones;
#  3. preset (cap 240 s; predicted ~200 s, of which ~40 s writing 16 GB of random bf16 weights, ~30 s
#     loading them, ~60 s compiling, ~25 s for two iterations (plan.py's prediction for this setting:
#     run the CPU path below to see it), ~20 s evaluating and ~25 s saving the final checkpoint (the
#     LoRA adapters and optimizer state; the frozen base is re-read from the folder)): an 8B-shaped random LLaDA-8B-Instruct checkpoint in the
#     HF layout with a stand-in tokenizer (experiments/preset_check.py --write_checkpoint), the paper
#     preset configs/paper.py:d1_countdown_daca (Countdown: generated, no data files) trained from it
#     for 2 iterations through experiments/train.py on one device, shrunk to fit (1 prompt x G 6, no
#     grad accumulation, completion 128 in 64 steps, 6 evaluation items; LoRA r 128, mu 8, DPS + SML
#     as the preset), while experiments/plan.py compiles the same setting with XLA:GPU for one compile-only
#     GPU of this kind (--target=gpu:<device>x1, on the CPU); then the run's seconds per iteration and
#     allocator peak next to that target-compiled plan's (experiments/preset_check.py).
#
#   bash experiments/scripts/gpu_check.sh [extra benchmark flags, e.g. --peak_tflops=989]
#   GPU_CHECK_DEVICE=h100 bash experiments/scripts/gpu_check.sh    # predictions for an H100 (default h200)
#   GPU_CHECK_STEPS=preset bash experiments/scripts/gpu_check.sh   # one step
#   GPU_CHECK_SIZE=tiny bash experiments/scripts/gpu_check.sh      # CPU, tiny model: the same logic
#
# The GPU image lacks ml-collections (configs/*.py, train.py, plan.py --config): carry it as a wheel
# in .whl/ (the device README's "pip download ... -d .whl ml-collections==1.1.0"); wheels found there
# are installed first. Writes ${OUT:-/tmp}/gpu_check.json, iteration_check.json, preset_plan.json,
# preset_check.json and the run in ${OUT:-/tmp}/preset_run. Not yet run on a GPU: only the tiny CPU
# path has been exercised (tests/planning/test_plan.py, tests/planning/test_preset_plan.py).
set -uo pipefail
cd "$(dirname "$0")/../.."
out_dir="${OUT:-/tmp}"
mkdir -p "${out_dir}"
device="${GPU_CHECK_DEVICE:-h200}"
steps="${GPU_CHECK_STEPS:-bench,iteration,preset}"
size="${GPU_CHECK_SIZE:-8b}"
# The plan compiles the iteration's programs once from shapes; with the persistent cache the real run
# reuses those executables instead of compiling them again.
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-/tmp/daca_jax_xla_cache}"
if compgen -G ".whl/*.whl" > /dev/null; then
  python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
if [[ "${size}" == "tiny" ]]; then
  bench=(--model=llada_8b --shrink --batch=2 --prompt_len=8 --gen_length=16 --block_length=8 --steps=4)
  iteration=(--model=tiny --layers=1 --prompt_len=4 --gen_length=8 --block_length=8 --steps=2 --group_size=2)
  fast=plain,prefix
  preset=(--config=configs/paper.py:d1_countdown_daca,smoke)
  caps=(300 300 600)
  plan_where=(--num_devices=1 --device="${device}")
else
  python -c "import jax; d = jax.devices()[0]; print('device:', d.platform, d.device_kind); \
assert d.platform == 'gpu', 'gpu_check.sh needs a GPU (jax[cuda]); GPU_CHECK_SIZE=tiny runs the CPU path'" || exit 1
  bench=(--model=llada_8b --batch=8 --prompt_len=64 --gen_length=256 --block_length=32 --steps=64)
  iteration=(--model=llada_8b --prompt_len=64 --gen_length=256 --block_length=32 --steps=128 --group_size=8)
  fast=plain,prefix,dual,threshold+dual
  preset=(--config=configs/paper.py:d1_countdown_daca --config.rl.prompts_per_step=1 --config.rl.grad_accum=1
          --config.rl.rollout_batch=0 --config.rollout.gen_length=128 --config.rollout.steps=64)
  caps=(90 150 240)
  plan_where=(--target="gpu:${device}x1")
fi
ckpt="${GPU_CHECK_CHECKPOINT:-/tmp/daca_jax_random_llada_${size}}"
# Shared by both sizes: 2 iterations, a small training pool, a few evaluation items, no validation
# split, no dashboards (tensorboardX is not on the GPU image), one checkpoint at the end.
preset+=(--config.model.init_checkpoint="${ckpt}" --config.rl.steps=2 --config.rl.eval_every=0
         --config.task.num_val_examples=0 --config.task.num_eval_examples=6 --config.eval.batch_size=6
         --config.sft.num_train_examples=64 --config.checkpoint.every=2 --config.log.tensorboard=False)

preset_step() {
  python experiments/preset_check.py --write_checkpoint="${ckpt}" --size="${size}" || return 1
  # plan.py compiles the same setting with XLA:GPU for one compile-only GPU of this kind (the target-compiled
  # plan a user gets on any host), on the CPU while the GPU trains; the tiny path plans one CPU device
  JAX_PLATFORMS=cpu python experiments/plan.py "${preset[@]}" "${plan_where[@]}" \
    --prompt_len_from_task --json="${out_dir}/preset_plan.json" > "${out_dir}/preset_plan.txt" 2>&1 &
  local plan_pid=$!
  rm -rf "${out_dir}/preset_run"
  python experiments/train.py "${preset[@]}" --workdir="${out_dir}/preset_run" --noprogress
  local train_rc=$?
  wait "${plan_pid}"
  local plan_rc=$?
  cat "${out_dir}/preset_plan.txt"
  [[ ${train_rc} -eq 0 && ${plan_rc} -eq 0 ]] || return 1
  python experiments/preset_check.py --plan_json="${out_dir}/preset_plan.json" --workdir="${out_dir}/preset_run" \
    --device="${device}" --json="${out_dir}/preset_check.json"
}

names=(bench iteration preset)
status=()
failed=0
for i in 0 1 2; do
  name="${names[$i]}"
  if [[ ",${steps}," != *",${name},"* ]]; then
    status+=("${name}: skipped")
    continue
  fi
  echo "=== step ${name} (cap ${caps[$i]} s)"
  start=$(date +%s)
  case "${name}" in
    bench) timeout "${caps[$i]}" python experiments/benchmark.py "${bench[@]}" --sections=rollout,fast --repeats=1 \
             --fast_variants="${fast}" --json="${out_dir}/gpu_check.json" "$@" ;;
    iteration) timeout "${caps[$i]}" python experiments/iteration_check.py "${iteration[@]}" --device="${device}" \
                 --json="${out_dir}/iteration_check.json" ;;
    preset) export -f preset_step; export ckpt size device out_dir
            timeout "${caps[$i]}" bash -c "$(declare -p preset plan_where); preset_step" ;;
  esac
  rc=$?
  took=$(( $(date +%s) - start ))
  if [[ ${rc} -eq 124 ]]; then
    status+=("${name}: TIMED OUT after ${took} s (cap ${caps[$i]} s)"); failed=1
  elif [[ ${rc} -ne 0 ]]; then
    status+=("${name}: FAILED (exit ${rc}) after ${took} s"); failed=1
  else
    status+=("${name}: ok in ${took} s (cap ${caps[$i]} s)")
  fi
done
echo "=== gpu_check.sh summary"
printf '%s\n' "${status[@]}"
exit ${failed}
