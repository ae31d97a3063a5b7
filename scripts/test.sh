#!/usr/bin/env bash
# README command 2: set up, then run the whole test suite (CPU only; no GPU needed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
# The dashboard's browser tests drive Debian's chromium through Playwright (no browser download).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium with apt-get (the dashboard's browser tests)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "error: the browser tests need chromium; install it (sudo apt-get install chromium) and run again" >&2
    exit 2
  fi
fi
exec .venv/bin/python -m pytest -q "$@"
