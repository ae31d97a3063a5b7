#!/usr/bin/env bash
# Issue 19 (in part) on the H200: the element-wise ops the built-in family gained, searched from
# their starting points with the real pipeline (bench/search_bench.py), against eager, both
# torch.compile modes and the floor.  Writes $OUT/search_mcts.json, run.txt and gpu.txt.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
out=${OUT:-bench/results/h200/issue19}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
rows=${ROWS:-softplus_bf16_8192x8192,mish_bf16_8192x8192,hardtanh_bf16_8192x8192,clamp_f32_8192x8192,softshrink_f32_8192x8192}
timeout 560 python3 bench/search_bench.py --strategy mcts --iterations "${ITERATIONS:-8}" --compile max-autotune \
  --rows "$rows" --budget-s 480 --out "$out" 2>&1 | tee "$out/run.txt" | tail -15
