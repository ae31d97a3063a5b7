#!/usr/bin/env bash
# README command 2: set up, then run the test suite (CPU only; no GPU needed). CI runs it bare.
#   bash scripts/test.sh              every tier but the exhaustive sweep: two pytest-xdist workers
#                                     for the unit, integration, sweep and browser tiers, then the
#                                     timing tier alone
#   bash scripts/test.sh --sweep      the same, with the exhaustive sweep (hours: see tests/sweep_points.py)
#   bash scripts/test.sh --cov        the same, with line coverage of src (worker processes included)
#   bash scripts/test.sh ARGS...      one pytest call on two workers with your arguments,
#                                     e.g. -m unit, or -n 0 -m timing, or tests/test_store.py -k runs
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

extra=() args=()
for arg in "$@"; do
  case "$arg" in
    --sweep) extra+=(--sweep) ;;
    --cov) extra+=(--cov --cov-report=term) ;;
    *) args+=("$arg") ;;
  esac
done
pytest=(.venv/bin/python -m pytest -q --durations=25)
# Two workers: the machine CI runs on has two cores, and most tests wait on a worker process or
# a compiler (tests/conftest.py's TIERS say what each tier starts). loadgroup: a module marked
# xdist_group runs on one worker, so that its module fixtures (a capture, a killed search) are
# made once, not once per worker.
if [ ${#args[@]} -gt 0 ]; then
  exec "${pytest[@]}" -n "${KERNFORGE_TEST_WORKERS:-2}" --dist loadgroup "${extra[@]}" "${args[@]}"
fi
# KERNFORGE_TEST_JUNIT=DIR: each phase's JUnit XML there (phase1.xml, timing.xml), for the tiers' times
junit1=() junit2=()
if [ -n "${KERNFORGE_TEST_JUNIT:-}" ]; then
  mkdir -p "$KERNFORGE_TEST_JUNIT"
  junit1=("--junitxml=$KERNFORGE_TEST_JUNIT/phase1.xml") junit2=("--junitxml=$KERNFORGE_TEST_JUNIT/timing.xml")
fi
status=0
"${pytest[@]}" -n "${KERNFORGE_TEST_WORKERS:-2}" --dist loadgroup -m "not timing" "${junit1[@]}" "${extra[@]}" || status=$?
# The timing tier measures the clock: alone on the machine, after everything else.
timing_cov=()
[[ " ${extra[*]} " == *" --cov "* ]] && timing_cov=(--cov-append)
"${pytest[@]}" -p no:xdist -m timing "${junit2[@]}" "${extra[@]}" "${timing_cov[@]}" || status=$?
exit $status
