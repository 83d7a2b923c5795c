#!/usr/bin/env bash
# Train on NVIDIA GPUs: many vmapped seeds in one program (the GPU's strength), then plot.
#
#   bash scripts/gpu_train.sh [SEEDS] [ENV] [extra `jaxdqn train` flags...]
#   bash scripts/gpu_train.sh 64 CartPole-v1 --timesteps 200000
#   DEVICES=auto bash scripts/gpu_train.sh 64        # 8 GPUs: 8 seeds per GPU
#   DEVICES=auto bash scripts/gpu_train.sh 1 CartPole-v1 --set num_envs_per_worker=64
#                                                    # one run, data parallel over every GPU
# Across machines, run the same command on each with
#   --coordinator HOST0:PORT --num-processes N --process-id I   (and DEVICES=auto).
#
# Installs jax with its CUDA 12 wheels (pip brings CUDA itself; only the NVIDIA driver must be
# present). `jaxdqn info` must list a `gpu` device, else jax fell back to the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${1:-32}
ENV=${2:-CartPole-v1}
shift $(( $# > 2 ? 2 : $# ))
pip install -q -e ".[cli]" "jax[cuda12]"
jaxdqn info
OUT=results/gpu_${ENV}_${SEEDS}seeds_$(date +%Y-%m-%d_%H-%M-%S)
# Keep XLA from reserving 75% of GPU memory up front (other jobs may share the card).
export XLA_PYTHON_CLIENT_PREALLOCATE=false
jaxdqn train --env "$ENV" --seeds "$SEEDS" --set num_devices="${DEVICES:-1}" --out "$OUT" \
  --checkpoint-every 20 --keep 2 "$@"
jaxdqn plot "$OUT"
