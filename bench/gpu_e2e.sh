#!/usr/bin/env bash
# A model end to end on a GPU: `kernforge optimize` (builtin proposer, chains, top-k, a time
# budget for the search, --no-apply), then `kernforge apply` (eager, patched eager, compile,
# patched compile, and each under CUDA graphs: eager captured whole, compile's reduce-overhead),
# and for the language models apply again with sdpa attention. Each model's files go to
# $OUT/<model>/ (the run's summary, results, events and phases kept even when a limit cut it),
# packed into $OUT/e2e-<models>.tgz.
#   bash bench/gpu_e2e.sh gemma qwen     (vae needs .whl carried: diffusers' wheel)
#   bash bench/gpu_e2e.sh vae:3m:180 resnet:90s:90   (a model's own search budget and apply limit)
# env: TOP_K (8), BUDGET (the search's --time-budget, 5m), ITERATIONS (cap, 20), APPLY_LIMIT (s, 240), SDPA (1)
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
out=${OUT:-/tmp/kf-e2e-out}
runs=/tmp/kf-issue32
mkdir -p "$out" "$runs"
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), 'torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$out/gpu.txt"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=src:/tmp/site
fi
applied=()
names=()
for arg in "$@"; do
  IFS=: read -r mode budget apply_limit <<< "$arg"
  budget=${budget:-${BUDGET:-5m}} apply_limit=${apply_limit:-${APPLY_LIMIT:-240}}
  names+=("$mode")
  opts=() lm=0
  case $mode in
    gemma) model=example:gemma_decoder lm=1 ;;
    qwen) model=example:qwen_moe lm=1 ;;
    vae) model=example:sd35_vae_decoder ;;
    resnet) model=example:resnet50 opts=(--batch-size 32) ;;
    *) echo "unknown model $mode"; continue ;;
  esac
  dir=$out/$mode
  mkdir -p "$dir"
  start=$(date +%s)
  # --no-apply: the budget is the search's; the safety limit is the budget and a minute
  budget_s=$(python3 -c "import sys; sys.path.insert(0, 'src'); from kernforge.search.budget import parse_duration; print(int(parse_duration('$budget')))")
  timeout $(( budget_s + 60 )) python3 -m kernforge optimize "$model" "${opts[@]}" --backend triton --fuse \
    --top-k "${TOP_K:-8}" --time-budget "$budget" --iterations "${ITERATIONS:-20}" --finalists 1 \
    --compile none --no-apply --runs-dir "$runs/$mode" > "$dir/search.log" 2>&1
  echo "$mode search: exit $? after $(( $(date +%s) - start )) s" | tee -a "$out/gpu.txt"
  run=$(ls -d "$runs/$mode"/* | tail -1)
  cp "$run/summary.json" "$run/results.tsv" "$run/events.jsonl" "$dir/" 2>/dev/null
  python3 -m kernforge show "$run" 2>/dev/null | grep "time by phase" | tee -a "$out/gpu.txt"
  python3 bench/node_phases.py "$run" > "$dir/node_phases.txt" 2>&1  # each candidate's seconds, judge included
  start=$(date +%s)
  # apply sizes its rounds to --time-limit; the shell's limit is kept as the safety net
  fit=$(( apply_limit > 60 ? apply_limit - 20 : apply_limit ))
  timeout "$apply_limit" python3 -m kernforge apply "$run" --time-limit "${fit}s" > "$dir/apply.log" 2>&1
  echo "$mode apply: exit $? after $(( $(date +%s) - start )) s" | tee -a "$out/gpu.txt"
  cp "$run/integrate/apply.json" "$dir/$mode-apply.json" 2>/dev/null && applied+=("$dir/$mode-apply.json")
  cp "$run/events.jsonl" "$dir/" 2>/dev/null
  if [ "$lm" = 1 ] && [ "${SDPA:-1}" = 1 ]; then
    start=$(date +%s)
    timeout "$apply_limit" python3 -m kernforge apply "$run" --attention sdpa --time-limit "${fit}s" > "$dir/apply-sdpa.log" 2>&1
    echo "$mode apply, sdpa: exit $? after $(( $(date +%s) - start )) s" | tee -a "$out/gpu.txt"
    cp "$run/integrate/apply.json" "$dir/$mode-sdpa-apply.json" 2>/dev/null && applied+=("$dir/$mode-sdpa-apply.json")
  fi
  tail -15 "$dir/search.log"
  tail -4 "$dir"/apply*.log
done
tar czf "$out/e2e-$(IFS=-; echo "${names[*]}").tgz" -C "$out" "${names[@]}" gpu.txt 2>/dev/null
[ ${#applied[@]} -gt 0 ] && python3 bench/e2e_table.py "${applied[@]}"
