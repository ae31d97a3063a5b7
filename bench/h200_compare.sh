#!/usr/bin/env bash
# MCTS against greedy (issue 5): the same rows, the same iterations, torch.compile not timed.
#   ROWS=a,b ITERATIONS=16 bash bench/h200_compare.sh
# Row by row, MCTS then greedy, so that a call cut short loses at most one row's pair.
set -euo pipefail
out=${OUT:-bench/results/h200/compare}
rows=${ROWS:-avgpool_f32_32x2048x7x7,softmax_f32_4096x256,softmax_f32_8x262144,group_norm_bf16_1x512x128x128}
first=1
for row in ${rows//,/ }; do
  for strategy in mcts greedy; do
    STRATEGY=$strategy COMPILE=none OUT=$out ROWS=$row APPEND=$([ $first = 1 ] && echo 0 || echo 1) \
      bash bench/h200_search.sh
  done
  first=0
done
python3 bench/compare_strategies.py "$out" | tee "$out/comparison.md"
