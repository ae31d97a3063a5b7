"""A run folder read back as typed records: what integrate, export, show and a dashboard read.

Every later stage reads a run through `read_run`, never through paths and TSV cells of its
own: the folder's layout can change with its format version, in this one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernforge.errors import UserError
from kernforge.evaluate import Baseline, Timing
from kernforge.search.engine import Node, TaskOutcome, previous_nodes
from kernforge.store.run import RUN_FORMAT, RunStore
from kernforge.tasks import KernelTask


@dataclass
class TaskRecord:
    task: KernelTask
    state: str  # pending | running | done
    outcome: TaskOutcome

    @property
    def winner(self) -> Node | None:
        """The finalist that beat eager beyond the noise (TaskOutcome.best), on a finished task."""
        return self.outcome.best if self.state == "done" else None


@dataclass
class RunRecord:
    root: Path
    format_version: int  # 0: written before run folders carried a version
    config: dict[str, Any]
    tasks: list[TaskRecord] = field(default_factory=list)

    @property
    def store(self) -> RunStore:
        return RunStore(self.root)

    @property
    def backend(self) -> str:
        return self.config["resolved_backend"]

    @property
    def device(self) -> str:
        return self.config["device"]

    @property
    def device_name(self) -> str:
        return self.config.get("device_name", "")

    @property
    def applied(self) -> dict[str, Any] | None:
        """`kernforge apply`'s report (integrate/apply.json), where the run was applied."""
        path = self.root / "integrate" / "apply.json"
        try:
            return json.loads(path.read_text()) if path.is_file() else None
        except (OSError, ValueError):
            return None

    def source_of(self, task_id: str, node: Node) -> Path:
        suffix = {"triton": ".py", "cuda": ".cu", "cpu": ".c"}[self.backend]
        return self.root / "tasks" / task_id / "nodes" / node.node_id / f"candidate{suffix}"


def read_run(path: Path) -> RunRecord:
    """The run at `path`; a UserError naming what is wrong when it is not a readable run folder."""
    path = Path(path)
    if not (path / "config.json").is_file() or not (path / "run.db").is_file():
        raise UserError(f"'{path}' is not a kernforge run folder (no config.json and run.db); "
                        "pass a folder that `kernforge optimize` made (see `kernforge ls`)")
    try:
        config = json.loads((path / "config.json").read_text())
        version = int(config.get("format_version", 0))
    except (OSError, ValueError, TypeError) as e:
        raise UserError(f"'{path}/config.json' cannot be read ({e}); the run folder is damaged") from None
    if version > RUN_FORMAT:
        raise UserError(f"'{path}' was written in run format {version}, newer than this kernforge "
                        f"reads ({RUN_FORMAT}); upgrade kernforge")
    if "resolved_backend" not in config or "device" not in config:
        raise UserError(f"'{path}/config.json' has no backend or device; the run folder is damaged")
    store = RunStore(path)
    try:
        tasks = [_task_record(store, task_id, state, data) for task_id, state, data in store.db.tasks()]
    except Exception as e:  # noqa: BLE001 - a damaged database or task file is one line, not a traceback
        raise UserError(f"'{path}' cannot be read as a run ({type(e).__name__}: {e}); "
                        "the run folder is damaged") from None
    return RunRecord(root=path, format_version=version, config=config, tasks=tasks)


def _task_record(store: RunStore, task_id: str, state: str, data: dict[str, Any]) -> TaskRecord:
    task = KernelTask(**data)
    baseline = read_baseline(store, task_id)
    outcome = TaskOutcome(task=task, baseline=baseline, nodes=previous_nodes(store, task_id),
                          error="" if baseline else "its baseline failed before the run stopped")
    return TaskRecord(task=task, state=state, outcome=outcome)


def read_baseline(store: RunStore, task_id: str) -> Baseline | None:
    relative = f"tasks/{task_id}/baseline.json"
    if not (store.root / relative).is_file():
        return None
    data = store.read_json(relative)
    return Baseline(**{**data, "eager": Timing(**data["eager"]) if data.get("eager") else None})
