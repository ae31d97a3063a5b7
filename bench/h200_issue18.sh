#!/usr/bin/env bash
# Issue 18 on the H200: a real Triton search whose run folder the dashboard and the report show.
#   bash bench/h200_issue18.sh        (from the checkout, PYTHONPATH=src; no package index needed)
# Writes $OUT/: gpu.txt, optimize.log, summary.json, report.html and report.md (kernforge report,
# run on the GPU machine), and run.tgz: the run folder without its input samples (for the
# dashboard's screenshots, taken on the CPU machine from this folder).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
out=${OUT:-bench/results/h200/issue18}
runs=/tmp/kf-issue18
mkdir -p "$out"
rm -rf "$runs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
python3 -c "import torch, triton, jinja2, pygments; print('torch', torch.__version__, 'triton', triton.__version__, 'jinja2', jinja2.__version__, 'pygments', pygments.__version__)" | tee -a "$out/gpu.txt"
timeout 480 python3 -m kernforge optimize example:attention --backend triton --iterations "${ITERATIONS:-14}" \
  --top-k "${TOP_K:-3}" --runs-dir "$runs" > "$out/optimize.log" 2>&1
echo "optimize: exit $?" | tee -a "$out/gpu.txt"
run=$(ls -d "$runs"/*/ | head -1)
cp "$run/summary.json" "$out/summary.json"
python3 -m kernforge report "$run" -o "$out/report.html" 2>&1 | tail -2
echo "report: exit ${PIPESTATUS[0]}" | tee -a "$out/gpu.txt"
tar czf "$out/run.tgz" --exclude='capture/samples' --exclude='*/build' --exclude='*/confirm/build' \
  -C "$runs" "$(basename "$run")"
ls -la "$out" | tee -a "$out/gpu.txt"
tail -25 "$out/optimize.log"
