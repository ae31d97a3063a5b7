#!/usr/bin/env bash
# Issue 15's GPU check, one device call:  bash bench/h200_issue15.sh
# The evaluator's GPU-side defences against cheating Triton and CUDA kernels (bench/cheats,
# tests/redteam/cases run natively and timed, tests/redteam/gpu), on the tiny softmax and the
# attention example's softmax; then the evaluator's cost per candidate before (the code of
# 3474a05, carried in .old/) and after, on the same tiny softmax.
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
out=${OUT:-bench/results/h200/issue15}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$out/gpu.txt"
python3 bench/evaluator_check.py "$out/small" tests/models/tiny_softmax.py tests/redteam/cases tests/redteam/gpu \
  tests/redteam/honest 2>&1 | tail -70 | tee "$out/evaluator_small.txt"
python3 bench/evaluator_check.py "$out/attention" example:attention tests/redteam/gpu 2>&1 | tail -20 \
  | tee "$out/evaluator_attention.txt"
if [ -d .old/src ]; then
  PYTHONPATH=.old/src python3 .old/bench/evaluator_check.py "$out/before_small" tests/models/tiny_softmax.py 2>&1 \
    | tail -12 | tee "$out/before_small.txt"
fi
