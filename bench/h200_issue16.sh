#!/usr/bin/env bash
# Issue 16 on the H200: optimize each bundled example at full size (--top-k 3) and apply the
# winners (on by default): the model four ways, each kernel alone in it, the routing cost.
#   bash bench/h200_issue16.sh smoke      the attention example, small: the pipeline on the GPU
#   bash bench/h200_issue16.sh resnet50   ResNet-50, batch 32, fp32
#   bash bench/h200_issue16.sh sd35_vae   the SD3.5 VAE decoder (carry .whl with diffusers' wheel)
#   bash bench/h200_issue16.sh gemma      the Gemma-style decoder (eager attention), then its run
#                                         applied with sdpa attention (eager only: the call's time)
#   bash bench/h200_issue16.sh qwen_moe   the Qwen-MoE block, the same way
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
  timeout "$limit" python3 -m kernforge apply "$run" --attention sdpa --no-compile --json > "$out/$name-sdpa.json" \
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

case "${1:-smoke}" in  # one model a call: a call has 10 minutes
  smoke)
    smoke ;;
  resnet50)
    one resnet50 560 example:resnet50 --batch-size 32 ;;
  sd35_vae)  # diffusers is not on the GPU machine: carry its wheel (.whl, see bench/results/h200/issue16)
    if ls .whl/diffusers-*.whl > /dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
      export PYTHONPATH=src:/tmp/site
    fi
    one sd35_vae 560 example:sd35_vae_decoder ;;
  gemma)
    one gemma 450 example:gemma_decoder
    sdpa gemma 110 ;;
  qwen_moe)
    one qwen_moe 450 example:qwen_moe
    sdpa qwen_moe 110 ;;
esac
rm -f "$out"/*.run
