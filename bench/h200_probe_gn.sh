#!/usr/bin/env bash
# The large group norm's probe points and two ncu profiles, then candidates per minute on 1 and 2
# GPUs (issue 6), in one device call on an nvidia-h200-x2, from the repository root:
#   OUT=DIR bash bench/h200_probe_gn.sh
# Everything goes to $OUT/x.tgz (the device returns a few files a call).
set -uo pipefail
export PYTHONUNBUFFERED=1
out=${OUT:?}/r
mkdir -p "$out"
nvidia-smi > "$out/nvidia-smi.txt"
row=group_norm_bf16_1x256x512x512
# scaling first, on an otherwise idle host and GPUs
PYTHONPATH=src timeout 300 python3 bench/gpu_scaling.py --gpus 0 0,1 --iterations 40 --parallel 4 \
    --out "$out/scaling" 2>&1 | tail -20 | tee "$out/scaling.log"
PYTHONPATH=src:. timeout 200 python3 bench/probe_templates.py --rows $row --timeout 180 --out "$out/probe" \
    2>&1 | tee "$out/probe.log" | tail -30
# the starting point (the queue) and the best resident point; probe4 profiled two resident ones
resident='{"variant":"resident","chunk":32768,"block":16384,"num_warps":16,"per_sm":2,"lead":2}'
for name in queue:'{}' resident:"$resident"; do
    label=${name%%:*}; point=${name#*:}
    PYTHONPATH=src:. timeout 120 ncu --set full -k "regex:gn_$label" -s 2 -c 1 -o "$out/ncu_$label" \
        python3 bench/run_template_point.py --row $row --point "$point" > "$out/ncu_$label.log" 2>&1
    ncu --import "$out/ncu_$label.ncu-rep" --page details > "$out/ncu_$label.txt" 2>&1
    grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Hit|Achieved Occupancy|Registers Per|Warp Cycles Per Issued" \
        "$out/ncu_$label.txt" | head -12
done
tar czf "$OUT/x.tgz" -C "$out" .
