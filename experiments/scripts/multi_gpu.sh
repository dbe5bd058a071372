#!/usr/bin/env bash
# DACA-GRPO on GPUs: one process per host, each driving all GPUs of its host.
#
# One host (no coordinator needed; the mesh covers the local GPUs):
#   CONFIG=configs/sudoku_tiny.py WORKDIR=runs/gpu STRATEGY=pmap bash experiments/scripts/multi_gpu.sh
#
# Several hosts: run the same command on every host with its own NODE_RANK (0 .. NUM_NODES-1);
# host 0 runs the coordinator at COORDINATOR (host:port, reachable from every host):
#   COORDINATOR=10.0.0.1:12355 NUM_NODES=2 NODE_RANK=0 STRATEGY=fsdp FSDP=8 \
#     CONFIG=... WORKDIR=/shared/runs/x bash experiments/scripts/multi_gpu.sh [--config.a.b=v ...]
# Under SLURM (`srun --ntasks-per-node=1 ...`) leave COORDINATOR/NUM_NODES/NODE_RANK unset and
# set DISTRIBUTED=1: jax.distributed.initialize() reads the SLURM environment itself.
#
# - The job calls jax.distributed.initialize() (daca_jax.parallel.maybe_initialize) when
#   `parallel.distributed=True` or JAX_COORDINATOR_ADDRESS is set; JAX_NUM_PROCESSES and
#   JAX_PROCESS_ID give the process count and this process's id.
# - STRATEGY=pmap: weights replicated on every GPU, the batch split over all GPUs (models that fit
#   one GPU). STRATEGY=fsdp: weights and Adam state sharded over FSDP GPUs (LLaDA-8B full
#   fine-tuning: use FSDP = GPUs per host so that weight all-gathers stay on NVLink; data = hosts).
# - prompts_per_step * group_size must be a multiple of the total number of GPUs; each process
#   rolls out and grades prompts_per_step / NUM_NODES prompts (daca_jax.parallel.process_slice).
# - WORKDIR must be on a file system shared by all hosts (checkpoints are written collectively; the
#   logs, metrics and results by process 0 only).
# - If one host dies, the others stop with a collective error after JAX's heartbeat timeout
#   (about a minute); rerun the same command on every host to resume from the last checkpoint.
set -euo pipefail
: "${WORKDIR:?set WORKDIR}"
CONFIG="${CONFIG:-configs/sudoku_tiny.py}"
STRATEGY="${STRATEGY:-fsdp}"
FSDP="${FSDP:-$(nvidia-smi -L | wc -l)}"  # default: shard over the GPUs of one host
cd "$(dirname "$0")/../.."

# Let XLA use most of each GPU's memory instead of its 75% default; pre-allocation stays on.
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.92}"
distributed=False
if [[ -n "${COORDINATOR:-}" ]]; then
  : "${NUM_NODES:?set NUM_NODES with COORDINATOR}" "${NODE_RANK:?set NODE_RANK with COORDINATOR}"
  export JAX_COORDINATOR_ADDRESS="${COORDINATOR}" JAX_NUM_PROCESSES="${NUM_NODES}" JAX_PROCESS_ID="${NODE_RANK}"
  distributed=True
elif [[ "${DISTRIBUTED:-0}" == 1 ]]; then
  distributed=True
fi

exec python experiments/train.py --config="${CONFIG}" --workdir="${WORKDIR}" \
  --config.parallel.strategy="${STRATEGY}" --config.parallel.fsdp="${FSDP}" \
  --config.parallel.distributed="${distributed}" "$@"
