#!/usr/bin/env bash
# Issue 20 on the H200: fused chains of the Gemma-style decoder (bf16, 2048 tokens) against eager's
# chain and torch.compile of the same chain, and the single-op search of the same model.
#   bash bench/h200_issue20.sh fused    optimize with chains ranked beside single ops (--fuse)
#   bash bench/h200_issue20.sh single   the same model and budget with --no-fuse: the pieces alone
#   bash bench/h200_issue20.sh vae      the SD3.5 VAE decoder (bf16, 128x128 latents): group norm then
#                                       SiLU fused (carry .whl with diffusers' wheel: the GPU has none)
# Per mode: $OUT/<mode>.json (summary.json), <mode>.log, <mode>-results.tsv, <mode>-profile.json.
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
out=${OUT:-bench/results/h200/issue20}
runs=/tmp/kf-issue20-runs
mkdir -p "$out" "$runs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$out/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$out/gpu.txt"
mode=${1:-fused}
flag=$([ "$mode" = single ] && echo --no-fuse || echo --fuse)
model=example:gemma_decoder
if [ "$mode" = vae ]; then
  model=example:sd35_vae_decoder
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
  export PYTHONPATH=src:/tmp/site
fi
before=$(ls "$runs" | wc -l)
timeout "${LIMIT:-540}" python3 -m kernforge optimize "$model" --dtype bf16 --backend triton \
  --top-k "${TOP_K:-5}" --iterations "${ITERATIONS:-8}" --finalists 2 --no-apply --runs-dir "$runs" $flag \
  > "$out/$mode.log" 2>&1
echo "$mode: exit $?" | tee -a "$out/gpu.txt"
if [ "$(ls "$runs" | wc -l)" -gt "$before" ]; then
  run=$(ls -d "$runs"/* | tail -1)
  cp "$run/summary.json" "$out/$mode.json" 2>/dev/null
  cp "$run/results.tsv" "$out/$mode-results.tsv" 2>/dev/null
  cp "$run/capture/profile.json" "$out/$mode-profile.json" 2>/dev/null
  # the winners' sources, to read and re-run by hand
  best=$(python3 -c "import json; d=json.load(open('$run/summary.json')); print(' '.join(r['task']+':'+(r['best_node'] or '') for r in d['tasks']))" 2>/dev/null)
  for pair in $best; do
    task=${pair%%:*}; node=${pair#*:}
    [ -n "$node" ] && cp "$run/tasks/$task/nodes/$node/"candidate.* "$out/$mode-$task-$node.py" 2>/dev/null
  done
fi
tail -30 "$out/$mode.log"
