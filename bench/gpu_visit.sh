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
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
stage=${1:?stage: routing, vae, models or qwen}
out=${OUT:-/tmp/kf-visit-out}
work=/tmp/kf-visit/$stage
mkdir -p "$out" "$work"
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
    summary=("$work/routing_gemma.txt" "$work/routing_resnet.txt" "$work/runway.txt" "$work/scaling.txt")
    ;;
  vae)
    OUT=$work TOP_K=8 bash bench/gpu_e2e.sh vae:4m:180 > "$work/e2e.txt" 2>&1
    summary=("$work/e2e.txt")
    ;;
  models)
    OUT=$work TOP_K=8 SDPA=0 bash bench/gpu_e2e.sh resnet:100s:120 > "$work/e2e_resnet.txt" 2>&1
    OUT=$work TOP_K=6 SDPA=1 bash bench/gpu_e2e.sh gemma:90s:100 > "$work/e2e_gemma.txt" 2>&1
    summary=("$work/e2e_resnet.txt" "$work/e2e_gemma.txt")
    ;;
  qwen)
    OUT=$work TOP_K=6 SDPA=1 bash bench/gpu_e2e.sh qwen:100s:120 > "$work/e2e_qwen.txt" 2>&1
    summary=("$work/e2e_qwen.txt")
    ;;
  *) echo "unknown stage $stage"; exit 2 ;;
esac
tar czf "$out/visit-$stage.tgz" -C "$(dirname "$work")" "$stage"
for f in "${summary[@]}"; do
  echo "== $(basename "$f")"
  tail -14 "$f"
done
