#!/usr/bin/env bash
# the built-in proposer's trees before (c2af383) and after the proposer reshape: same proposals, same parents
set -u
for tree in /tmp/kf-old /work/main; do
  name=$(basename $tree)
  for strat in mcts greedy; do
    rm -rf /tmp/same-$name-$strat
    (cd $tree && TRITON_INTERPRET=1 PYTHONPATH=src /work/main/.venv/bin/python -m kernforge optimize tests/models/tiny_softmax.py \
      --backend triton --iterations 12 --top-k 2 --strategy $strat --finalists 0 --no-apply --runs-dir /tmp/same-$name-$strat --json > /tmp/same-$name-$strat.json 2>/tmp/same-$name-$strat.err)
    run=$(ls -d /tmp/same-$name-$strat/*/ | head -1)
    sqlite3 $run/run.db "select task, node, parent, status, rationale from nodes order by task, node" > /tmp/same-$name-$strat.tsv 2>/dev/null || \
      /work/main/.venv/bin/python -c "import sqlite3,sys; [print('|'.join(map(str,r))) for r in sqlite3.connect('$run/run.db').execute('select task,node,parent,status,rationale from nodes order by task,node')]" > /tmp/same-$name-$strat.tsv
  done
done
for strat in mcts greedy; do
  if diff -q /tmp/same-kf-old-$strat.tsv /tmp/same-main-$strat.tsv; then echo "$strat: identical trees ($(wc -l < /tmp/same-main-$strat.tsv) nodes)"; else echo "$strat: DIFFERENT"; fi
done
