"""Where each candidate's seconds went in a run: per node, what the search waited for it
(evaluation_s), its worker's life (wall_s) and the steps inside (the worker's phases and the
search process's "judge"), a finalist's confirmation too. What evaluation_s holds beyond the
worker's wall and the judge is the scan, a retime's second run, and the worker's start.

    PYTHONPATH=src python bench/node_phases.py RUN_DIR [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kernforge.store.run import RunStore


def rows(run: Path) -> list[dict]:
    out = []
    store = RunStore(run)
    for record in store.db.nodes():
        confirm = store.node_dir(record.task, record.node) / "confirm.json"
        confirmed = json.loads(confirm.read_text()) if confirm.is_file() else None
        for label, r in (("search", record.result), ("confirm", confirmed)):
            if not r:
                continue
            out.append({"task": record.task, "node": record.node, "as": label, "status": r.get("status"),
                        "evaluation_s": r.get("evaluation_s", 0.0), "wall_s": r.get("wall_s", 0.0),
                        "phases": r.get("phases", {}), "retimed": bool(r.get("retimed"))})
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    table = rows(args.run)
    for row in table:
        steps = " ".join(f"{k}={v:.1f}" for k, v in row["phases"].items())
        print(f"{row['task'][:28]:28} {row['node']} {row['as']:7} {row['status']:13} waited {row['evaluation_s']:6.1f} s "
              f"worker {row['wall_s']:6.1f} s{' retimed' if row['retimed'] else ''}  {steps}")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
