#!/usr/bin/env bash
# README command 2: set up, then run the whole test suite (CPU only; no GPU needed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
exec .venv/bin/python -m pytest -q "$@"
