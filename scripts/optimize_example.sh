#!/usr/bin/env bash
# README command 1: set up, then optimize the bundled attention example with the
# built-in proposer on whatever device is here (triton on a GPU, C + OpenMP on a CPU).
# The run takes about four minutes, apply included (--time-budget 4m), unless the
# arguments give a --time-budget or --iterations of their own: on a loaded 2-core CPU
# it took 8.5 minutes without one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh triton,zoo
budget=(--time-budget 4m)
for arg in "$@"; do
  case "$arg" in
    --time-budget|--time-budget=*|--iterations|--iterations=*) budget=() ;;
  esac
done
exec .venv/bin/kernforge optimize example:attention --proposer builtin "${budget[@]}" "$@"
