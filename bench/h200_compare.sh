#!/usr/bin/env bash
# MCTS against greedy (issue 5): the same rows, the same iterations, torch.compile not timed.
#   ROWS=a,b ITERATIONS=16 bash bench/h200_compare.sh
set -euo pipefail
out=${OUT:-bench/results/h200/compare}
for strategy in mcts greedy; do
  STRATEGY=$strategy COMPILE=none OUT=$out bash bench/h200_search.sh
done
python3 bench/compare_strategies.py "$out" | tee "$out/comparison.md"
