#!/usr/bin/env bash
# Issue 4's GPU check, run on the H200 through the device tool:  bash bench/h200_evaluator.sh
# The cheats of bench/cheats/ against the attention example's softmax, then the
# evaluator's own cost per candidate on a small op (the tiny test model's softmax).
set -euo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
out=${OUT:-bench/results/h200}
mkdir -p "$out/small"
python3 bench/evaluator_check.py "$out/small" tests/models/tiny_softmax.py 2>&1 | tail -9 | tee "$out/evaluator_small_op.txt"
python3 bench/evaluator_check.py "$out" example:attention 2>&1 | tail -12 | tee "$out/evaluator_check.txt"
