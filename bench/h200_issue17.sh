#!/usr/bin/env bash
# Issue 17 on the H200: the llm proposer against a scripted OpenAI-compatible endpoint on loopback
# (no real LLM is reachable from the GPU machine), and the CUDA worked example the generator is shown.
#   bash bench/h200_issue17.sh [llm|mixed]   (carry .whl: the openai client's wheels for Python 3.12 in .whl/llm)
# llm (the default) also evaluates the CUDA example; mixed writes under $OUT/mixed.
# Writes $OUT/: gpu.txt, the scripted run's prompts.json, summary.json, tree.tsv, build_report.txt,
# optimize.log, and cuda_example.txt (kernforge eval of the CUDA example on the same softmax).
set -uo pipefail
export PYTHONUNBUFFERED=1
out=${OUT:-bench/results/h200/issue17}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$out/gpu.txt"
which cuobjdump | tee -a "$out/gpu.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/llm/*.whl \
  2>&1 | tail -2
export PYTHONPATH=src:/tmp/site
python3 -c "import openai; print('openai', openai.__version__)" | tee -a "$out/gpu.txt"

mode=${1:-llm}
if [ "$mode" = mixed ]; then
  timeout 500 python3 bench/scripted_llm_run.py "$out/mixed" --proposer mixed --iterations "${ITERATIONS:-10}" 2>&1 \
    | tee "$out/mixed-run.txt" | tail -30
  echo "scripted mixed run: exit ${PIPESTATUS[0]}" | tee -a "$out/gpu.txt"
  exit 0
fi
timeout 420 python3 bench/scripted_llm_run.py "$out" --iterations "${ITERATIONS:-10}" 2>&1 | tee "$out/run.txt" | tail -30
echo "scripted run: exit ${PIPESTATUS[0]}" | tee -a "$out/gpu.txt"

python3 - <<'PY' > /tmp/cuda_example.cu
import sys; sys.path.insert(0, "src")
from kernforge.propose.llm.prompts import worked_example
print(worked_example("cuda"))
PY
timeout 150 python3 -m kernforge eval /tmp/kf-issue17-model/softmax_scores.py /tmp/cuda_example.cu --backend cuda \
  --op aten::_softmax.default --runs-dir /tmp/kf-issue17-eval > "$out/cuda_example.txt" 2>&1
echo "cuda example: exit $?" | tee -a "$out/gpu.txt"
tail -12 "$out/cuda_example.txt"
