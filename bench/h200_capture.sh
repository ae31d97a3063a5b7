#!/usr/bin/env bash
# Issue 3's GPU check, run on the H200 through the device tool with `carry: [".whl"]`:
#   bash bench/h200_capture.sh
# .whl/ holds the diffusers wheel (the GPU image has no diffusers); see README.
set -euo pipefail
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
out=${OUT:-bench/results/h200}
mkdir -p "$out"
python3 -c "import torch, transformers, diffusers, torchvision; print('torch', torch.__version__, 'transformers', transformers.__version__, 'diffusers', diffusers.__version__, 'torchvision', torchvision.__version__)"
python3 -m kernforge profile example:resnet50 --batch-size 32 --limit 12
python3 bench/capture_check.py "$out" 2>&1 | tee "$out/capture_check.txt"
