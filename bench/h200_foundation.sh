#!/usr/bin/env bash
# The foundation's GPU check (issue 2), run on the H200 through the device tool from
# the repository root:  bash bench/h200_foundation.sh
# It profiles the bundled attention example on the GPU, searches its softmax with
# the triton backend, and writes everything under $OUT (or bench/results/h200/).
set -euo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
out=${OUT:-bench/results/h200}
mkdir -p "$out"
iterations=${ITERATIONS:-12}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$out/gpu.txt"

python3 -m kernforge profile example:attention --json > "$out/profile_attention.json"
python3 -m kernforge profile example:attention --limit 8

start=$(date +%s)
python3 -m kernforge optimize example:attention --backend triton --iterations "$iterations" \
    --top-k 2 --runs-dir /tmp/kf-runs 2>&1 | tee "$out/optimize_attention.txt"
echo "wall seconds: $(( $(date +%s) - start ))" | tee -a "$out/optimize_attention.txt"
run=$(ls -d /tmp/kf-runs/*/ | tail -n 1)
cp "$run/results.tsv" "$out/results_attention.tsv"
cp "$run/summary.json" "$out/summary_attention.json"
