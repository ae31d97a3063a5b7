#!/usr/bin/env bash
# Issue 19 on the H200: the rebuilt built-in proposer on the ops it gained (reductions over each
# kind of dimension, max/argmax, cumsum, instance norm, batch statistics) and on the cuda
# backend's new templates, each searched from the starting point its family's rule chose, with
# the real pipeline (bench/search_bench.py), against eager, torch.compile and the floor.
#   PART=triton|cuda  ITERATIONS (6)  COMPILE (default | max-autotune: both modes)  ROWS (override)
# Appends to $OUT/search_mcts.json (rows keyed by row and backend) and writes table_mcts.md.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
out=${OUT:-bench/results/h200/issue19}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
case ${PART:-triton} in
  triton) backend=triton
          default_rows=sum_f32_8x4096x2047_dim1,sum_bf16_8192x8192_dim0,sum_bf16_8192x8192_dim1,sum_f32_64x512x1024_dims02,mean_bf16_32x512x56x56_dims23,max_f32_4096x8192_dim1,argmax_bf16_8192x32000_dim1,argmin_f32_8192x4096_dim0,cumsum_f32_1024x16384_dim1,cumsum_bf16_16384x1024_dim0,instance_norm_f32_16x64x128x128,batch_norm_train_bf16_64x256x56x56 ;;
  cuda)   backend=cuda
          default_rows=layer_norm_bf16_8192x4096,rms_norm_bf16_8192x4096,softplus_bf16_8192x8192,group_norm_bf16_1x512x128x128,softmax_f32_8x262144 ;;
  *) echo "PART is triton or cuda" >&2; exit 2 ;;
esac
timeout "${LIMIT_S:-570}" python3 bench/search_bench.py --backend "$backend" --strategy mcts \
  --iterations "${ITERATIONS:-6}" --compile "${COMPILE:-default}" --rows "${ROWS:-$default_rows}" \
  --budget-s "${BUDGET_S:-480}" --out "$out" --append 2>&1 | tee "$out/run_$backend.txt" | tail -22
