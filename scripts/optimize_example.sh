#!/usr/bin/env bash
# README command 1: set up, then optimize the bundled attention example with the
# built-in proposer on whatever device is here (triton on a GPU, C + OpenMP on a CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh triton,zoo
exec .venv/bin/kernforge optimize example:attention --proposer builtin "$@"
