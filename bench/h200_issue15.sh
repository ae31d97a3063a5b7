#!/usr/bin/env bash
# Issue 15's GPU check, one device call:  bash bench/h200_issue15.sh
# 1. The evaluator against cheating Triton and CUDA kernels (bench/cheats, tests/redteam/cases run
#    natively and timed, tests/redteam/gpu) on the tiny softmax and the attention example's softmax.
# 2. The same tiny-softmax candidates with the static and object scans off (KERNFORGE_SCANS=off,
#    for this measurement only): what the runtime defences catch on their own, on the GPU.
# 3. With .old/ carried (git archive of the code before the rebuild), the evaluator's cost per
#    candidate before, on the same tiny softmax.
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
KERNFORGE_SCANS=off python3 bench/evaluator_check.py "$out/noscan" tests/models/tiny_softmax.py tests/redteam/cases \
  tests/redteam/gpu 2>&1 | tail -70 | tee "$out/evaluator_small_noscan.txt"
if [ -d .old/src ]; then
  PYTHONPATH=.old/src python3 .old/bench/evaluator_check.py "$out/before_small" tests/models/tiny_softmax.py 2>&1 \
    | tail -12 | tee "$out/before_small.txt"
fi
