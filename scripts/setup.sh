#!/usr/bin/env bash
# Sets up .venv with kernforge and what it needs; safe to run again (installs only what is missing).
# Usage: bash scripts/setup.sh [extras]   extras: triton,zoo (default) or test
set -euo pipefail
cd "$(dirname "$0")/.."
extra=${1:-triton,zoo}
python=${PYTHON:-python3}

need_apt=()
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc)
"$python" -c "import venv, ensurepip" >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${need_apt[*]} with apt-get" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "error: kernforge needs ${need_apt[*]}; install them (e.g. sudo apt-get install ${need_apt[*]}) and run again" >&2
    exit 2
  fi
fi

[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch and torchvision first, as a pair that imports together (PyPI's torchvision
# does not load beside the 2.13 CPU wheel); a plain range would pull the newest
# CUDA build, gigabytes more.
.venv/bin/python -c "import torch, torchvision" >/dev/null 2>&1 ||
  .venv/bin/python -m pip install -q "torch==2.14.1" "torchvision==0.29.1"
.venv/bin/python -m pip install -q -e ".[${extra}]"
