#!/usr/bin/env bash
# Issue 32 part 1 on the H200: native dispatch built there, a Triton kernel's route in C++ against
# the Python router, a CUDA graph's capture of it, and the chain routes of the Gemma-style and
# Qwen-MoE blocks (bf16) with native entries and with Python ones. Writes $OUT/*.json, gpu.txt.
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
out=${OUT:-bench/results/h200/issue32}
mkdir -p "$out"
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), 'torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$out/gpu.txt"
start=$(date +%s)
python3 -c "from kernforge.runtime import dispatch; print('native dispatch built:', dispatch.native_module() is not None, dispatch.why_not_native())"
echo "build: $(( $(date +%s) - start )) s" | tee -a "$out/gpu.txt"
python3 bench/issue32_native.py --out "$out" 2>&1 | tee "$out/native.log"
for spec in gemma_decoder qwen_moe; do
  python3 bench/issue32_routing.py --spec example:$spec --dtype bf16 --top 8 --out "$out" 2>&1 | tail -12
  KERNFORGE_NATIVE_DISPATCH=0 python3 bench/issue32_routing.py --spec example:$spec --dtype bf16 --top 8 --out "$out" 2>&1 | tail -12
done
