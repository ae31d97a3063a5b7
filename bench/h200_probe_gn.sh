#!/usr/bin/env bash
# The group norm rows' probe points, then ncu profiles of the large row's queue start and a
# held point, in one device call on an nvidia-h200, from the repository root:
#   OUT=DIR bash bench/h200_probe_gn.sh
# FORMS: the forms of each held point to time, e.g. template,elements (probe_templates.py --forms).
# Everything goes to $OUT/x.tgz (the device returns a few files a call). Candidates per minute
# on 1 and 2 GPUs (issue 6) were measured by an earlier form of this script: bench/gpu_scaling.py.
set -uo pipefail
export PYTHONUNBUFFERED=1
out=${OUT:?}/r
mkdir -p "$out"
nvidia-smi > "$out/nvidia-smi.txt"
large=group_norm_bf16_1x256x512x512
small=group_norm_bf16_1x512x128x128
[ "${PROBE:-1}" = 1 ] && PYTHONPATH=src:. timeout $(( ${ROW_TIMEOUT:-150} + 150 )) python3 bench/probe_templates.py --rows ${GN_ROWS:-$large,$small} --timeout ${ROW_TIMEOUT:-150} --out "$out/probe" \
    ${VARIANTS:+--variants $VARIANTS} ${FORMS:+--forms $FORMS} \
    2>&1 | tee "$out/probe.log" | grep -v "^\s*$" | tail -45
# the queue's start and the held start (the row's start since 29fb66c)
queue='{"variant":"queue","chunk":8192,"block":4096,"num_warps":4,"per_sm":8,"lead":4}'
# PROFILE: which of the two to profile (unset: both; empty: neither)
for label in ${PROFILE-queue held}; do
    point='{}'; [ "$label" = queue ] && point=$queue
    PYTHONPATH=src:. timeout 120 ncu --set full -k "regex:gn_$label" -s 2 -c 1 -o "$out/ncu_$label" \
        python3 bench/run_template_point.py --row $large --point "$point" > "$out/ncu_$label.log" 2>&1
    ncu --import "$out/ncu_$label.ncu-rep" --page details > "$out/ncu_$label.txt" 2>&1
    # where the warps wait: the sampled stall reasons, whole kernel and per SASS instruction
    ncu --import "$out/ncu_$label.ncu-rep" --page raw --csv 2>/dev/null | python3 -c "
import csv, sys
rows = list(csv.reader(sys.stdin))
for name, unit, value in zip(*rows[:3]):
    if 'pcsamp' in name or 'warp_issue_stalled' in name:
        print(name, value)" > "$out/ncu_${label}_stalls.txt" 2>&1
    ncu --import "$out/ncu_$label.ncu-rep" --page source --csv --print-source sass > "$out/ncu_${label}_sass.csv" 2>&1
    echo "== $label"
    grep -E "Duration|DRAM Throughput|L2 Hit|Achieved Occupancy|Registers Per|Warp Cycles Per Issued" \
        "$out/ncu_$label.txt" | head -8
done
tar czf "$OUT/x.tgz" -C "$out" .
