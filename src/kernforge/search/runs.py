"""A run folder read back as typed records: what integrate, export, show and a dashboard read.

Every later stage reads a run through `read_run`, never through paths and TSV cells of its
own: the folder's layout can change with its format version, in this one place.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from kernforge.backends import get_backend
from kernforge.errors import UserError
from kernforge.phases import PHASES
from kernforge.records import EndToEnd, RunSummary
from kernforge.records.config import RunConfig
from kernforge.records.evaluation import Baseline, EvalResult
from kernforge.records.nodes import Node, TaskOutcome
from kernforge.records.proposal import Proposal
from kernforge.records.task import KernelTask
from kernforge.search.nodes import previous_nodes
from kernforge.search.siblings import seeded_from
from kernforge.store.events import (Event, EventTail, NodeFinished, NodeStarted, RunEnded, RunStarted,
                                    PhaseTimed, SearchStopped, TaskEnded, TasksChosen, TaskStarted)
from kernforge.store.run import RUN_FORMAT, RunStore


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

    @cached_property
    def settings(self) -> RunConfig:
        """config.json as a record (config: the dict as written)."""
        return RunConfig.from_json(self.config)

    @property
    def backend(self) -> str:
        return self.settings.backend

    @property
    def device(self) -> str:
        return self.settings.device

    @property
    def device_name(self) -> str:
        return self.settings.device_name

    @property
    def applied(self) -> EndToEnd | None:
        """`kernforge apply`'s report (integrate/apply.json), where the run was applied."""
        path = self.root / "integrate" / "apply.json"
        try:
            return EndToEnd.read(json.loads(path.read_text())) if path.is_file() else None
        except (OSError, ValueError):
            return None

    def source_of(self, task_id: str, node: Node) -> Path:
        suffix = get_backend(self.backend).source_suffix
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
                          error="" if baseline else "its baseline failed before the run stopped",
                          seeded_from=seeded_from(store, task_id))
    return TaskRecord(task=task, state=state, outcome=outcome)


def read_baseline(store: RunStore, task_id: str) -> Baseline | None:
    relative = f"tasks/{task_id}/baseline.json"
    if not (store.root / relative).is_file():
        return None
    data = store.read_json(relative)
    return Baseline.from_json(data)


# ---------------------------------------------------------------- a run as far as it can be read

@dataclass
class NodeState:
    """One candidate as its folder holds it: finished (with its Node), in flight, or lost (started
    by a run that stopped before it finished)."""

    node_id: str
    parent_id: str | None
    state: str  # done | running | lost
    folder: Path
    node: Node | None = None  # a finished one's proposal and result
    proposal: Proposal | None = None
    source: Path | None = None  # candidate.py|.cu|.c as proposed
    started: float | None = None
    finished: float | None = None


@dataclass
class TaskState:
    task_id: str
    op: str = ""
    shape: str = ""
    dtype: str = ""
    share: float = 0.0
    iterations: int = 0
    state: str = "pending"  # pending | running | done
    task: KernelTask | None = None
    baseline: Baseline | None = None
    nodes: list[NodeState] = field(default_factory=list)  # in the order they finished, then in flight
    tree: dict[str, Any] = field(default_factory=dict)  # tasks/<task>/tree.json: the strategy's statistics
    stopped: str = ""
    error: str = ""
    started: float | None = None
    seeded_from: str = ""  # the sibling's task/node its search started from (its task_start event)

    @property
    def outcome(self) -> TaskOutcome | None:
        """The finished nodes as the search saw them (TaskOutcome.best decides the winner)."""
        if self.task is None:
            return None
        return TaskOutcome(task=self.task, baseline=self.baseline, nodes=[n.node for n in self.nodes if n.node],
                           error=self.error, stopped=self.stopped, seeded_from=self.seeded_from)


@dataclass
class PartialRun:
    """What a dashboard or a report shows: everything in the folder that can be read, and in
    `problems` what could not (a torn file, a missing baseline), one line each."""

    root: Path
    config: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    tasks: list[TaskState] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    profile: dict[str, Any] | None = None
    summary: RunSummary | None = None
    applied: EndToEnd | None = None  # integrate/apply.json
    status: str = "stopped"  # running | finished | stopped
    problems: list[str] = field(default_factory=list)

    @property
    def started(self) -> float | None:
        starts = [e.time for e in self.events if isinstance(e, RunStarted)]
        return starts[0] if starts else (self.events[0].time if self.events else None)

    @property
    def last_event(self) -> float | None:
        return self.events[-1].time if self.events else None

    @property
    def settings(self) -> RunConfig:
        """config.json as a record, as far as it could be read."""
        return RunConfig.from_json(self.config)


# A run whose process cannot be asked (another host) counts as running while it wrote an event
# this recently: an LLM proposal can take minutes, a baseline with torch.compile about one.
QUIET_S = 900.0


def read_run_partial(path: Path, now: float | None = None) -> PartialRun:
    """The run at `path`, read as far as it can be; never raises for a damaged folder."""
    run = PartialRun(root=Path(path))
    run.config = _json_or_problem(run, "config.json") or {}
    if not isinstance(run.config, dict):
        run.problems.append("config.json is not a record; it is left out")
        run.config = {}
    try:
        version = run.settings.format_version
    except (TypeError, ValueError):
        version = 0
    if version > RUN_FORMAT:
        run.problems.append(f"written in run format {version}, newer than this kernforge reads ({RUN_FORMAT}): "
                            "what is shown may be incomplete; upgrade kernforge")
    tail = EventTail(run.root / "events.jsonl")
    run.events = tail.read_new()
    if tail.unreadable:
        run.problems.append(f"events.jsonl: {tail.unreadable} line(s) are not JSON and were skipped")
    run.profile = _json_or_problem(run, "capture/profile.json", missing_ok=True)
    summary = _json_or_problem(run, "summary.json", missing_ok=True)
    applied = _json_or_problem(run, "integrate/apply.json", missing_ok=True)
    run.skipped = _rows_of(_json_or_problem(run, "skipped.json", missing_ok=True) or _skipped_from_events(run.events))
    if run.profile is not None and not isinstance(run.profile, dict):
        run.problems.append("profile is not the record it should be; it is left out")
        run.profile = None
    run.summary = _summary_or_problem(run, summary)
    run.applied = EndToEnd.read(applied)
    if applied and run.applied is None:
        run.problems.append("applied is not the record it should be; it is left out")
    run.tasks = _task_states(run)
    run.status = _run_status(run, time.time() if now is None else now)
    return run


def _summary_or_problem(run: PartialRun, data: Any) -> RunSummary | None:
    try:
        return RunSummary.from_json(data) if data is not None else None
    except (AttributeError, TypeError, ValueError):  # a list, or a hand-edited field of the wrong kind
        run.problems.append("summary is not the record it should be; it is left out")
        return None


def _json_or_problem(run: PartialRun, relative: str, missing_ok: bool = False) -> Any:
    path = run.root / relative
    if not path.is_file():
        if not missing_ok:
            run.problems.append(f"{relative} is missing")
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        run.problems.append(f"{relative} cannot be read ({type(e).__name__}); it is left out")
        return None


def _skipped_from_events(events: list[Event]) -> list[dict[str, Any]]:
    chosen = [e for e in events if isinstance(e, TasksChosen)]
    return chosen[-1].skipped if chosen else []


def _rows_of(value: Any) -> list[dict[str, Any]]:
    """The dicts of a list read from a file; anything else in it is dropped."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _task_states(run: PartialRun) -> list[TaskState]:
    """Tasks in the run's order: those the events announced, then any other folder under tasks/."""
    tasks: dict[str, TaskState] = {}
    for event in run.events:
        if isinstance(event, TasksChosen):
            for t in (t for t in event.tasks if isinstance(t, dict)):
                tasks.setdefault(t.get("task", ""), TaskState(task_id=t.get("task", ""), op=t.get("op", ""),
                                                              shape=t.get("shape", ""), share=t.get("share", 0.0)))
    folders = sorted(p.name for p in (run.root / "tasks").iterdir()) if (run.root / "tasks").is_dir() else []
    for name in folders:
        tasks.setdefault(name, TaskState(task_id=name))
    for state in tasks.values():
        _fill_task(run, state)
    _apply_events(run, tasks)
    return [t for t in tasks.values() if t.task_id]


def _fill_task(run: PartialRun, state: TaskState) -> None:
    folder = run.root / "tasks" / state.task_id
    if not folder.is_dir():
        return
    data = _json_or_problem(run, f"tasks/{state.task_id}/task.json", missing_ok=True)
    if data:
        try:
            state.task = KernelTask(**data)
            state.op, state.shape, state.dtype, state.share = (state.task.op, state.task.shape_text,
                                                              state.task.dtype_text, state.task.share)
        except TypeError as e:
            run.problems.append(f"tasks/{state.task_id}/task.json is not a task ({e})")
    try:
        state.baseline = read_baseline(RunStore(run.root), state.task_id)
    except (OSError, ValueError, TypeError, KeyError) as e:
        run.problems.append(f"tasks/{state.task_id}/baseline.json cannot be read ({type(e).__name__})")
    tree = _json_or_problem(run, f"tasks/{state.task_id}/tree.json", missing_ok=True)
    state.tree = tree if isinstance(tree, dict) and isinstance(tree.get("nodes", {}), dict) else {}
    nodes_dir = folder / "nodes"
    if nodes_dir.is_dir():
        state.nodes = [n for n in (_node_state(run, state.task_id, p) for p in sorted(nodes_dir.iterdir())) if n]


def _node_state(run: PartialRun, task_id: str, folder: Path) -> NodeState | None:
    relative = f"tasks/{task_id}/nodes/{folder.name}"
    record = _json_or_problem(run, f"{relative}/proposal.json", missing_ok=True)
    if record is None:
        return None  # made by `kernforge eval` (no proposal), or its files were not written yet
    source = next((p for p in sorted(folder.glob("candidate.*"))), None)
    text = source.read_text(errors="replace") if source else ""
    proposal = Proposal.from_record(text, record)
    state = NodeState(node_id=folder.name, parent_id=record.get("parent"), state="running", folder=folder,
                      proposal=proposal, source=source)
    if not (folder / "result.json").is_file():
        return state
    result = _json_or_problem(run, f"{relative}/result.json")
    if result is None:
        return None  # torn or damaged: said in the problems, and not drawn as if it still ran
    try:
        confirm = _json_or_problem(run, f"{relative}/confirm.json", missing_ok=True)
        state.node = Node(node_id=folder.name, parent_id=state.parent_id, proposal=proposal,
                          result=EvalResult.from_json(result), kept=bool(result.get("kept")),
                          confirmed=EvalResult.from_json(confirm) if confirm else None)
        state.state = "done"
    except (TypeError, KeyError, ValueError) as e:
        run.problems.append(f"{relative}/result.json is not a result ({type(e).__name__}); the node is left out")
        return None
    return state


def _apply_events(run: PartialRun, tasks: dict[str, TaskState]) -> None:
    """What only the events say: when each node started and finished (their order), the tasks'
    states, budgets and why a search stopped."""
    started: dict[tuple[str, str], float] = {}
    finished: dict[tuple[str, str], float] = {}
    for e in run.events:
        task = tasks.get(getattr(e, "task", ""))
        if task is None:
            continue
        if isinstance(e, TaskStarted):
            task.state, task.started, task.iterations = "running", task.started or e.time, e.iterations
            task.op, task.shape = task.op or e.op, task.shape or e.shape
            task.dtype, task.share = task.dtype or e.dtype, task.share or e.share
            task.seeded_from = e.seeded_from or task.seeded_from  # a resume's start says it again
        elif isinstance(e, NodeStarted):
            started[(e.task, e.node)] = e.time
        elif isinstance(e, NodeFinished):
            finished[(e.task, e.node)] = e.time
        elif isinstance(e, SearchStopped):
            task.stopped = e.reason
        elif isinstance(e, TaskEnded):
            task.state, task.error = "done", e.error
    for task in tasks.values():
        for n in task.nodes:
            n.started = started.get((task.task_id, n.node_id))
            n.finished = finished.get((task.task_id, n.node_id))
            if n.finished is None and n.node is not None:
                n.finished = _mtime(n.folder / "result.json")
        done = sorted((n for n in task.nodes if n.node), key=lambda n: (n.finished or 0.0, n.node_id))
        task.nodes = done + [n for n in task.nodes if not n.node]
        if task.state == "pending" and task.nodes:
            task.state = "running"


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _run_status(run: PartialRun, now: float) -> str:
    """finished (the search's last event is run_end), running (its process is alive, or on another
    host it wrote lately), or stopped (killed or crashed: `kernforge optimize --resume` goes on)."""
    starts = [i for i, e in enumerate(run.events) if isinstance(e, RunStarted)]
    if not starts:
        return "finished" if run.summary else "stopped"
    start = run.events[starts[-1]]
    if any(isinstance(e, RunEnded) for e in run.events[starts[-1]:]):
        status = "finished"
    elif start.host == socket.gethostname() and start.pid:
        status = "running" if _alive(start.pid) else "stopped"
    else:
        status = "running" if now - (run.last_event or 0.0) < QUIET_S else "stopped"
    for task in run.tasks:
        for n in task.nodes:
            # in flight when its process ended: this run is over, or it was started before a resume
            if n.state == "running" and (status != "running" or (n.started or start.time) < start.time):
                n.state = "lost"
    return status


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process with that id: alive, say so
    return True


# ---------------------------------------------------------------- where the run's time went

def run_phases(events: list[Event]) -> dict[str, float]:
    """Seconds per phase (kernforge.phases.PHASES, in its order), summed over the run's sessions
    (a resumed run has several) and any later `kernforge apply`. "other" is each session's wall
    time, from its start to its run_end (or its last event, if it was killed), that no phase
    accounts for."""
    totals = dict.fromkeys(PHASES, 0.0)
    wall = accounted = 0.0
    began: float | None = None
    last = 0.0
    for event in events:
        if isinstance(event, RunStarted):
            if began is not None:
                wall += last - began
            began = event.began or event.time
        if isinstance(event, PhaseTimed):
            totals[event.phase] = totals.get(event.phase, 0.0) + event.seconds
            accounted += event.seconds if began is not None else 0.0
        last = event.time
        if isinstance(event, RunEnded) and began is not None:
            wall, began = wall + last - began, None
    if began is not None:
        wall += last - began
    totals["other"] = max(0.0, wall - accounted)
    return totals
