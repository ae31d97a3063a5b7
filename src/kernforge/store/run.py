"""The run folder.

    runs/<timestamp>-<model>/
      config.json          the resolved options, versions and device
      capture/             profile.json and samples/<signature>/<k>.pt (real inputs)
      tasks/<task>/        task.json, baseline.json, baseline/ (job, log, result);
                           reference.pt (fresh inputs, float64 oracle) while the task runs
        nodes/<node>/      candidate.c|py as proposed, proposal.json, job, log, result.json
      results.tsv          one row per evaluated candidate, appended as it finishes
      summary.json         the best result per task, written at the end

Every file is written when its step ends, so a crash loses at most the
candidate in flight.
"""

from __future__ import annotations

import csv
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULT_COLUMNS = ["task", "node", "parent", "status", "failure_reason", "p50_ms", "p20_ms", "p80_ms",
                  "eager_p50_ms", "speedup_vs_eager", "faster_than_eager", "kept", "eval_s", "rationale"]


@dataclass
class RunStore:
    root: Path

    @classmethod
    def create(cls, runs_dir: Path, model_name: str) -> RunStore:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", model_name)[:40] or "model"
        root = runs_dir / f"{stamp}-{safe}"
        suffix = 1
        while root.exists():
            suffix += 1
            root = runs_dir / f"{stamp}-{safe}-{suffix}"
        root.mkdir(parents=True)
        return cls(root)

    @property
    def capture_dir(self) -> Path:
        return self.root / "capture"

    def task_dir(self, task_id: str) -> Path:
        path = self.root / "tasks" / task_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def node_dir(self, task_id: str, node_id: str) -> Path:
        path = self.task_dir(task_id) / "nodes" / node_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write_json(self, relative: str, data: Any) -> None:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, default=str))
        tmp.replace(path)  # readers never see a half-written file

    def read_json(self, relative: str) -> Any:
        return json.loads((self.root / relative).read_text())

    def append_result(self, row: dict[str, Any]) -> None:
        path = self.root / "results.tsv"
        new = not path.exists()
        with open(path, "a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=RESULT_COLUMNS, delimiter="\t", extrasaction="ignore",
                                    lineterminator="\n")
            if new:
                writer.writeheader()
            writer.writerow({k: _tsv_cell(row.get(k)) for k in RESULT_COLUMNS})

    def results(self) -> list[dict[str, str]]:
        path = self.root / "results.tsv"
        if not path.exists():
            return []
        with open(path, newline="") as f:
            return list(csv.DictReader(f, delimiter="\t"))


def _tsv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return " ".join(str(value).split())  # one line per row, whatever the message held


def list_runs(runs_dir: Path) -> list[RunStore]:
    if not runs_dir.is_dir():
        return []
    return [RunStore(p) for p in sorted(runs_dir.iterdir()) if (p / "config.json").is_file()]
