#!/usr/bin/env bash
# MCTS against greedy (issue 5): the same rows, the same iterations, torch.compile not timed.
#   ROWS=a,b ITERATIONS=16 [SIDE_BY_SIDE=1] bash bench/h200_compare.sh
# Row by row, appending, so that a call cut short loses at most one row per strategy.
# SIDE_BY_SIDE=1 (a machine with 2+ GPUs): MCTS's rows on GPU 0 and greedy's on GPU 1 at the
# same time, each strategy's whole process pinned to its GPU; otherwise MCTS then greedy per row.
set -euo pipefail
out=${OUT:-bench/results/h200/compare}
rows=${ROWS:-avgpool_f32_32x2048x7x7,softmax_f32_4096x256,softmax_f32_8x262144,group_norm_bf16_1x512x128x128}

strategy_rows() {  # strategy, then the rows one after another, appending after the first
  local strategy=$1 first=1
  for row in ${rows//,/ }; do
    STRATEGY=$strategy COMPILE=none OUT=$out ROWS=$row APPEND=$([ $first = 1 ] && echo 0 || echo 1) \
      bash bench/h200_search.sh
    first=0
  done
}

if [ "${SIDE_BY_SIDE:-0}" = 1 ]; then
  CUDA_VISIBLE_DEVICES=0 strategy_rows mcts > "$out.mcts.log" 2>&1 &
  mcts=$!
  CUDA_VISIBLE_DEVICES=1 strategy_rows greedy > "$out.greedy.log" 2>&1 &
  greedy=$!
  wait $mcts $greedy || true
  tail -n 3 "$out.mcts.log" "$out.greedy.log"
else
  first=1
  for row in ${rows//,/ }; do
    for strategy in mcts greedy; do
      STRATEGY=$strategy COMPILE=none OUT=$out ROWS=$row APPEND=$([ $first = 1 ] && echo 0 || echo 1) \
        bash bench/h200_search.sh
    done
    first=0
  done
fi
python3 bench/compare_strategies.py "$out" | tee "$out/comparison.md"
