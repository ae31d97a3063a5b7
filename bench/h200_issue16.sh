#!/usr/bin/env bash
# Issue 16 on the H200: optimize each bundled example at full size (--top-k 3) and apply the
# winners (on by default): the model four ways, each kernel alone in it, the routing cost.
#   bash bench/h200_issue16.sh smoke    the attention example, small: the pipeline on the GPU
#   bash bench/h200_issue16.sh vision   ResNet-50 (batch 32, fp32) and the SD3.5 VAE decoder
#   bash bench/h200_issue16.sh lm       the Gemma-style decoder and the Qwen-MoE block (eager
#                                       attention), then each run applied with sdpa attention
# Per model: $OUT/<name>.json (summary.json with its end_to_end report) and $OUT/<name>.log.
# Search budget (device time is short): 3 candidates per op (ITERATIONS), 1 finalist, no per-op compile peer.
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
out=${OUT:-bench/results/h200/issue16}
runs=/tmp/kf-issue16-runs
mkdir -p "$out" "$runs"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$out/gpu.txt"
SEARCH="--top-k 3 --iterations ${ITERATIONS:-3} --finalists 1 --compile none --runs-dir $runs --backend ${BACKEND:-triton}"

one() {  # one NAME SECONDS SPEC [options...]: optimize + apply, its summary and log into $out
  local name=$1 limit=$2; shift 2
  local before; before=$(ls "$runs" | wc -l)
  timeout "$limit" python3 -m kernforge optimize $SEARCH "$@" > "$out/$name.log" 2>&1
  echo "$name: exit $? after optimize" | tee -a "$out/gpu.txt"
  local run; run=$(ls -d "$runs"/* | tail -1)
  [ "$(ls "$runs" | wc -l)" -gt "$before" ] && cp "$run/summary.json" "$out/$name.json" 2>/dev/null
  echo "$run" > "$out/$name.run"
  tail -25 "$out/$name.log"
}

sdpa() {  # sdpa NAME SECONDS: the run of NAME applied to the same model with sdpa attention
  local name=$1 limit=$2 run; run=$(cat "$out/$name.run")
  timeout "$limit" python3 -m kernforge apply "$run" --attention sdpa --json > "$out/$name-sdpa.json" \
    2>> "$out/$name.log"
  echo "$name sdpa: exit $?" | tee -a "$out/gpu.txt"
  tail -5 "$out/$name.log"
}

smoke() {  # the pipeline on the GPU, small; stops the call where it does not reach apply's report
  one attention-small 150 example:attention --scale small --top-k 1 --iterations 2
  python3 -c "import json,sys; d=json.load(open('$out/attention-small.json')); e=d.get('end_to_end') or {}; \
print('smoke end_to_end:', e.get('error') or e.get('speedups') or e.get('note')); sys.exit(0 if e and 'error' not in e else 1)" \
    || { echo "smoke failed: stopping"; exit 1; }
}

case "${1:-smoke}" in
  smoke)
    smoke ;;
  vision)
    smoke
    one resnet50 250 example:resnet50 --batch-size 32
    one sd35_vae 250 example:sd35_vae_decoder ;;
  resnet50)  # alone, where the device time left holds one model
    one resnet50 470 example:resnet50 --batch-size 32 ;;
  lm)
    one gemma 220 example:gemma_decoder
    one qwen_moe 220 example:qwen_moe
    sdpa gemma 45
    sdpa qwen_moe 45 ;;
esac
rm -f "$out"/*.run
