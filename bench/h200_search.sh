#!/usr/bin/env bash
# Issue 5's GPU benchmark, run on the H200 through the device tool from the repository root:
#   STRATEGY=mcts ITERATIONS=50 ROWS=a,b,... [APPEND=1] [LANES=2] bash bench/h200_search.sh
# LANES=N: N rows searched side by side, lane k on GPU k (an nvidia-h200-x2 or larger).
# One `kernforge optimize` per row of BENCHMARKS.md's operator table (bench/seed_ops.py),
# the builtin proposer, torch.compile default and max-autotune-no-cudagraphs timed as peers.
# Writes search_<strategy>.json, table_<strategy>.md and, per row, <strategy>_<row>/ (results.tsv,
# baseline, one line per candidate with its phases) under $OUT; the run folders stay in /tmp.
set -euo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
out=${OUT:-bench/results/h200/search}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt"
args=(--strategy "${STRATEGY:-mcts}" --iterations "${ITERATIONS:-50}" --compile "${COMPILE:-max-autotune}"
      --parallel "${PARALLEL:-0}" --budget-s "${BUDGET_S:-1e9}" --out "$out")
if [ -n "${ROWS:-}" ]; then args+=(--rows "$ROWS"); fi
if [ "${APPEND:-0}" = 1 ]; then args+=(--append); fi
if [ -n "${LANES:-}" ]; then args+=(--lanes "$LANES"); fi
python3 bench/search_bench.py "${args[@]}"
