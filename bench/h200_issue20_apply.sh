#!/usr/bin/env bash
# Issue 20 end to end on the H200: a fused-chain search, then its winners installed into the model
# (`kernforge apply`: eager and torch.compile, each kernel alone and together, checked against the
# model in float64 on the captured and two fresh input sets).
#   bash bench/h200_issue20_apply.sh gemma   example:gemma_decoder, bf16, 2048 tokens
#   bash bench/h200_issue20_apply.sh vae     example:sd35_vae_decoder, bf16 (carry .whl: diffusers' wheel)
# Writes $OUT/<mode>-apply.json (integrate/apply.json), <mode>-summary.json, <mode>.log, <mode>-apply.log.
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
out=${OUT:-bench/results/h200/issue20}
runs=/tmp/kf-issue20-apply
mkdir -p "$out" "$runs"
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), 'torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$out/gpu.txt"
mode=${1:-gemma}
model=example:gemma_decoder
if [ "$mode" = vae ]; then
  model=example:sd35_vae_decoder
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
  export PYTHONPATH=src:/tmp/site
fi
start=$(date +%s)
timeout "${SEARCH_LIMIT:-300}" python3 -m kernforge optimize "$model" --dtype bf16 --backend triton --fuse \
  --top-k "${TOP_K:-2}" --iterations "${ITERATIONS:-6}" --finalists 1 --no-apply --runs-dir "$runs" \
  > "$out/$mode.log" 2>&1
echo "$mode search: exit $? after $(( $(date +%s) - start )) s" | tee -a "$out/gpu.txt"
run=$(ls -d "$runs"/* | tail -1)
cp "$run/summary.json" "$out/$mode-summary.json" 2>/dev/null
cp "$run/results.tsv" "$out/$mode-results.tsv" 2>/dev/null
start=$(date +%s)
timeout "${APPLY_LIMIT:-260}" python3 -m kernforge apply "$run" > "$out/$mode-apply.log" 2>&1
echo "$mode apply: exit $? after $(( $(date +%s) - start )) s" | tee -a "$out/gpu.txt"
cp "$run/integrate/apply.json" "$out/$mode-apply.json" 2>/dev/null
tail -25 "$out/$mode.log"
tail -40 "$out/$mode-apply.log"
