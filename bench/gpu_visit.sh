#!/usr/bin/env bash
# What issues 32 and 34 still need from a GPU, in three calls of under ten minutes each (a session
# has 30 minutes of device time): each stage packs its files into $OUT/visit-<stage>.tgz (a call
# brings back at most 8 files) and prints a short summary last.
#   stage routing: native dispatch built against the GPU's torch, the chains' routing costs (Gemma
#     bf16, ResNet-50 fp32 with its batch norm chains), the runway's share of a small op's timing,
#     and candidates a minute on a small op with each candidate's phases (~5 min)
#   stage vae: the VAE decoder searched under a 4-minute budget, then applied (~8 min; carry .whl)
#   stage models: ResNet-50 (batch 32) and the Gemma-style decoder (with sdpa too), each searched
#     and applied (~9 min); Qwen-MoE goes in a fourth call where time is left: `STAGE=qwen`
#     bash bench/gpu_visit.sh qwen
#   stage resnet, gemma: one model of `models` a call, with a longer search (~6 min each; resnet
#     first times its chains' routes, ~1 min)
#   stage vae-search, then vae-apply: the VAE searched under 7m30s, then applied in a second call on
#     the same warm machine (carry .whl in both; the run folder stays in /tmp between them)
#   stage ray: the same search with --executor ray and local on one GPU, verdicts compared (carry .ray)
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
stage=${1:?stage: routing, vae, models, resnet, gemma, qwen or ray}
out=${OUT:-/tmp/kf-visit-out}
work=/tmp/kf-visit/$stage
mkdir -p "$out" "$work"
# The stage runs under its own limit, below the call's, so that what it made is packed even where
# a step overran (a call cut by the device's limit brings back only what is already under $OUT).
if [ -z "${KF_VISIT_INNER:-}" ]; then
  KF_VISIT_INNER=1 timeout -k 5 "${VISIT_LIMIT:-570}" bash "$0" "$stage"
  rc=$?
  [ $rc = 124 ] && echo "stage $stage cut at ${VISIT_LIMIT:-570} s" | tee -a "$work/gpu.txt"
  tar czf "$out/visit-$stage.tgz" -C "$(dirname "$work")" "$stage"
  cat "$work/gpu.txt"
  for f in "$work"/*.txt; do
    [ "$(basename "$f")" = gpu.txt ] && continue
    echo "== $(basename "$f")"
    tail -14 "$f"
  done
  exit $rc
fi
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), 'torch', torch.__version__, 'triton', triton.__version__)" \
  | tee "$work/gpu.txt"
case $stage in
  routing)
    start=$(date +%s)
    python3 -c "from kernforge.runtime import dispatch; print('native dispatch built:', dispatch.native_module() is not None, dispatch.why_not_native())" \
      | tee -a "$work/gpu.txt"
    echo "native build: $(( $(date +%s) - start )) s" | tee -a "$work/gpu.txt"
    timeout 120 python3 bench/issue32_routing.py --spec example:gemma_decoder --dtype bf16 --top 8 --out "$work" > "$work/routing_gemma.txt" 2>&1
    timeout 120 python3 bench/issue32_routing.py --spec example:resnet50 --dtype fp32 --top 8 --out "$work" > "$work/routing_resnet.txt" 2>&1
    timeout 60 python3 bench/module_route_overhead.py > "$work/module_route.txt" 2>&1
    PYTHONPATH=src:. timeout 120 python3 bench/timing_noise.py --runways 0 100000 250000 1000000 > "$work/runway.txt" 2>&1
    timeout 200 python3 bench/gpu_scaling.py --gpus 0 --executors local --parallel 1 8 --iterations 16 --out "$work" \
      > "$work/scaling.txt" 2>&1
    ;;
  vae)
    OUT=$work TOP_K=8 bash bench/gpu_e2e.sh vae:4m:180 > "$work/e2e.txt" 2>&1
    ;;
  models)
    OUT=$work TOP_K=8 SDPA=0 bash bench/gpu_e2e.sh resnet:80s:100 > "$work/e2e_resnet.txt" 2>&1
    OUT=$work TOP_K=6 SDPA=1 bash bench/gpu_e2e.sh gemma:75s:90 > "$work/e2e_gemma.txt" 2>&1
    ;;
  resnet)  # one model a call, with more search time than `models` gives it; its chains' routes first
    timeout 120 python3 bench/issue32_routing.py --spec example:resnet50 --dtype fp32 --top 16 --out "$work" \
      > "$work/routing_resnet.txt" 2>&1
    OUT=$work TOP_K=8 SDPA=0 bash bench/gpu_e2e.sh resnet:220s:160 > "$work/e2e_resnet.txt" 2>&1
    ;;
  gemma)
    OUT=$work TOP_K=6 SDPA=1 bash bench/gpu_e2e.sh gemma:180s:100 > "$work/e2e_gemma.txt" 2>&1
    ;;
  vae-search)  # the VAE's search alone, under 7m30s (two calls on one warm machine: then vae-apply)
    OUT=$work TOP_K=8 bash bench/gpu_e2e.sh vae:7m30s:1 > "$work/e2e.txt" 2>&1
    ;;
  vae-apply)  # apply on the run vae-search left in /tmp (the machine must still be the warm one)
    export PYTHONPATH=src:/tmp/site
    run=$(ls -d /tmp/kf-issue32/vae/* 2>/dev/null | tail -1)
    if [ -z "$run" ]; then
      echo "no VAE run in /tmp/kf-issue32/vae: the machine is not the one vae-search ran on" | tee -a "$work/gpu.txt"
    else
      timeout 540 python3 -m kernforge apply "$run" --time-limit 500s > "$work/apply.log" 2>&1
      echo "vae apply: exit $?" | tee -a "$work/gpu.txt"
      cp "$run/integrate/apply.json" "$work/vae-apply.json" 2>/dev/null
      python3 bench/e2e_table.py "$work/vae-apply.json" > "$work/table.txt" 2>&1
      tail -4 "$work/apply.log"
    fi
    ;;
  ray)
    # Ray is not on the device's index-less Python: .ray/raysite.tar.xz is ray and its deps for
    # CPython 3.12 (pip install --target, carried in with carry [".ray"]).
    mkdir -p /tmp/raysite && tar xJf .ray/raysite.tar.xz -C /tmp/raysite
    PYTHONPATH=src:/tmp/raysite timeout 500 python3 bench/gpu_scaling.py --gpus 0 --executors local ray --parallel 4 \
      --iterations 16 --out "$work" > "$work/scaling_ray.txt" 2>&1
    ;;
  qwen)
    OUT=$work TOP_K=6 SDPA=1 bash bench/gpu_e2e.sh qwen:100s:120 > "$work/e2e_qwen.txt" 2>&1
    ;;
  *) echo "unknown stage $stage"; exit 2 ;;
esac
