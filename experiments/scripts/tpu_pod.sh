#!/usr/bin/env bash
# DACA-GRPO on a Cloud TPU pod slice (e.g. v5p-64 = 8 hosts x 4 chips): one process per TPU VM host,
# all started at once with `--worker=all`.
#
#   TPU_NAME=my-v5p-64 ZONE=us-east5-a WORKDIR=/mnt/shared/runs/llada_daca \
#     CONFIG=configs/sudoku_tiny.py FSDP=8 bash experiments/scripts/tpu_pod.sh [--config.a.b=v ...]
#
# - Every host runs the same command. `--config.parallel.distributed=True` makes the job call
#   jax.distributed.initialize() before touching devices; on TPU VMs JAX finds the coordinator, the
#   process count and this host's id itself (no env vars needed).
# - The mesh spans all chips of the slice: `parallel.fsdp` chips share each weight (FSDP), `data`
#   (0 = the rest) replicates that group. LLaDA-8B full fine-tuning needs FSDP (weights + Adam +
#   reference ~ 144 GB); a tiny model fits one chip and can use `strategy=pmap` instead.
# - prompts_per_step * group_size must be a multiple of the number of chips (each chip takes
#   whole rows; groups may span chips, advantages are computed over whole groups regardless).
# - WORKDIR is a directory every host sees at the same path (a Filestore/NFS mount, or a bucket
#   mounted with gcsfuse): checkpoints are written collectively, the other files by process 0 only.
# - Each host draws the same prompts per step and rolls out and grades its own share (whole
#   groups); prompts_per_step must be a multiple of the number of hosts.
# - If one host dies, the others stop with a collective error after JAX's heartbeat timeout
#   (about a minute); rerun the same command on every host to resume from the last checkpoint.
set -euo pipefail
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}" "${WORKDIR:?set WORKDIR (a path every host sees)}"
CONFIG="${CONFIG:-configs/sudoku_tiny.py}"
FSDP="${FSDP:-8}"
STRATEGY="${STRATEGY:-fsdp}"
REPO_DIR="${REPO_DIR:-daca_jax}"  # checkout location on every worker, relative to $HOME
cd "$(dirname "$0")/../.."

ssh_all() {  # runs "$1" on every worker of the slice
  gcloud compute tpus tpu-vm ssh "${TPU_NAME}" --zone="${ZONE}" --worker=all --command="$1"
}

# 1. Same code on every host (copy the working tree; a `git clone` of a pushed commit works too).
gcloud compute tpus tpu-vm scp --recurse --zone="${ZONE}" --worker=all . "${TPU_NAME}:~/${REPO_DIR}"
# 2. Install JAX for TPU and the package (idempotent).
ssh_all "cd ~/${REPO_DIR} && pip install -q -U 'jax[tpu]' && pip install -q -e '.[run]'"
# 3. Launch. Quote extra overrides so that they reach the remote shell unchanged.
extra="$(printf ' %q' "$@")"
ssh_all "cd ~/${REPO_DIR} && python experiments/train.py --config=${CONFIG} --workdir=${WORKDIR} \
  --config.parallel.strategy=${STRATEGY} --config.parallel.fsdp=${FSDP} \
  --config.parallel.distributed=True ${extra}"
