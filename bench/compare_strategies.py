"""MCTS against greedy on the same rows and budget, from two search_bench.py results.

    python3 bench/compare_strategies.py DIR    (reads DIR/search_mcts.json and DIR/search_greedy.json)

Per row: each strategy's best speedup over eager and the iterations it took to come
within 95% of it; last, the geometric mean of the best speedups (a row with no faster
kernel counts 1.0).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def main(folder: Path) -> int:
    runs = {s: {r["row"]: r for r in json.loads((folder / f"search_{s}.json").read_text())["rows"]}
            for s in ("mcts", "greedy")}
    rows = [name for name in runs["mcts"] if name in runs["greedy"]]
    print("| row | mcts best | mcts iters to 95% | greedy best | greedy iters to 95% |\n|---|---|---|---|---|")
    logs: dict[str, list[float]] = {"mcts": [], "greedy": []}
    for name in rows:
        cells = []
        for strategy in ("mcts", "greedy"):
            r = runs[strategy][name]
            best = r.get("speedup_vs_eager") or 1.0
            if not r.get("error"):
                logs[strategy].append(math.log(best))
            cells += [f"{best:.2f}x" if not r.get("error") else "error", str(r.get("iterations_to_95") or "-")]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for strategy, values in logs.items():
        if values:
            print(f"{strategy}: geometric mean of the best speedups {math.exp(sum(values) / len(values)):.3f}x "
                  f"over {len(values)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
