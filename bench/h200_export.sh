#!/usr/bin/env bash
# Issue 16's export check on the H200 through the device tool: a Triton run of the tiny softmax
# and a CUDA copy of it, each exported, pip-installed and used in a process where kernforge is not
# importable (bench/export_check.py says what is checked).
#   bash bench/h200_export.sh
set -euo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
out=${OUT:-bench/results/h200/export}
mkdir -p "$out"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_capability())"
rm -rf /tmp/runs-triton /tmp/work-triton /tmp/work-cuda
python3 -m kernforge optimize tests/models/tiny_softmax.py --backend triton --iterations 3 --top-k 1 \
  --runs-dir /tmp/runs-triton --no-apply > "$out/optimize-triton.txt" 2>&1 || { tail -30 "$out/optimize-triton.txt"; exit 1; }
tail -5 "$out/optimize-triton.txt"
python3 bench/export_check.py /tmp/runs-triton/* /tmp/work-triton 2>&1 | tee "$out/export-triton.txt"
cp /tmp/work-triton/manifest.json "$out/manifest-triton.json"
# the built-in proposer writes no CUDA: the same run relabelled, with a hand-written CUDA kernel
python3 bench/export_check.py /tmp/runs-triton/* /tmp/work-cuda --as-cuda 2>&1 | tee "$out/export-cuda.txt"
cp /tmp/work-cuda/manifest.json "$out/manifest-cuda.json"
