"""The run's events: one typed record per thing that happened, in events.jsonl as it happens.

The store writes them (RunStore.emit) and hands each to its listeners: the terminal
progress reads the same records the dashboard tails from the file, so the two can not
tell different stories. Every field has a default, so a line written by an older
kernforge (or cut short by a kill) still reads back; a kind this version does not know
is an UnknownEvent with its fields, not an error.

    run_start       a search begins (or a resumed one goes on)
    captured        the model's ops were recorded
    tasks           the ops chosen for the search, and the hotter ones skipped, with why
    resumed         a resumed run: the tasks already done, the nodes each had recorded
    task_start      a task's baseline is measured and its search begins
    node_start      a candidate was proposed and goes to a worker
    node            a candidate's result, with the task's standing after it
    no_proposal     a proposal that did not come (an LLM error, a reply with no code)
    confirm         a finalist evaluated again, alone
    search_stopped  why a task's search ended: its budget spent, nothing new to try, an LLM budget, failed proposals
    task_end        a task is done
    apply_progress  a step of installing the winners into the model
    applied         the winners installed and the model measured end to end
    run_end         the search is over; summary.json is written
    phase           a phase of the run (kernforge.phases) took so many seconds, for a task or the run
    phase_start     a phase of the run begins, with how much of its countable work is done
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from types import UnionType
from typing import Any, ClassVar, Union, get_args, get_origin, get_type_hints


@dataclass(kw_only=True)
class Event:
    kind: ClassVar[str] = ""
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "kind": self.kind, **{k: v for k, v in asdict(self).items() if k != "time"}}


@dataclass(kw_only=True)
class RunStarted(Event):
    kind: ClassVar[str] = "run_start"
    model: str = ""
    backend: str = ""
    device: str = ""
    device_name: str = ""
    proposer: str = ""
    strategy: str = ""
    iterations: int = 0
    resumed: bool = False
    pid: int = 0  # the search process: a dashboard on the same host asks whether it still runs
    host: str = ""
    began: float = 0.0  # when the process began the run (loading the model); 0: at this event


@dataclass(kw_only=True)
class Captured(Event):
    kind: ClassVar[str] = "captured"
    signatures: int = 0
    op_time_ms: float = 0.0
    ranked_by: str = ""  # eager | compile (capture/compiled.py); "" in runs from before
    warning: str = ""  # why a ranking asked to use the compiled model could not


@dataclass(kw_only=True)
class TasksChosen(Event):
    kind: ClassVar[str] = "tasks"
    tasks: list[dict[str, Any]] = field(default_factory=list)  # task, op, shape, share
    skipped: list[dict[str, Any]] = field(default_factory=list)  # op, share, reason


@dataclass(kw_only=True)
class Resumed(Event):
    kind: ClassVar[str] = "resumed"
    done: list[str] = field(default_factory=list)
    recorded_nodes: dict[str, int] = field(default_factory=dict)


@dataclass(kw_only=True)
class TaskStarted(Event):
    kind: ClassVar[str] = "task_start"
    task: str = ""
    op: str = ""
    shape: str = ""
    dtype: str = ""
    share: float = 0.0
    iterations: int = 0
    eager_p50_ms: float | None = None
    compile_p50_ms: float | None = None
    resumed_nodes: int = 0
    seeded_from: str = ""  # the sibling's task/node its search starts from (search/siblings.py), or ""


@dataclass(kw_only=True)
class NodeStarted(Event):
    kind: ClassVar[str] = "node_start"
    task: str = ""
    node: str = ""
    parent: str | None = None
    origin: str = ""
    model: str = ""
    usage: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class NodeFinished(Event):
    kind: ClassVar[str] = "node"
    task: str = ""
    node: str = ""
    parent: str | None = None
    status: str = ""
    reason: str = ""
    kept: bool = False
    speedup_vs_eager: float | None = None
    faster_than_eager: bool = False
    p50_ms: float | None = None
    rationale: str = ""
    origin: str = ""
    # the task's standing once this node is in: what a progress line or a dashboard shows
    candidates: int = 0
    best_speedup_vs_eager: float | None = None  # beyond the noise; None: nothing beat eager yet
    counts: dict[str, int] = field(default_factory=dict)


@dataclass(kw_only=True)
class ProposalFailed(Event):
    kind: ClassVar[str] = "no_proposal"
    task: str = ""
    policy: str = ""  # exhausted | retry | budget
    reason: str = ""
    usage: dict[str, Any] = field(default_factory=dict)
    file: str = ""  # tasks/<task>/proposals/pNNNN.json, where a transcript was kept


@dataclass(kw_only=True)
class Confirmed(Event):
    kind: ClassVar[str] = "confirm"
    task: str = ""
    node: str = ""
    status: str = ""
    reason: str = ""
    speedup_vs_eager: float | None = None
    search_speedup_vs_eager: float | None = None
    best_speedup_vs_eager: float | None = None


@dataclass(kw_only=True)
class SearchStopped(Event):
    kind: ClassVar[str] = "search_stopped"
    task: str = ""
    reason: str = ""


@dataclass(kw_only=True)
class TaskEnded(Event):
    kind: ClassVar[str] = "task_end"
    task: str = ""
    candidates: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    best_node: str | None = None
    best_speedup_vs_eager: float | None = None
    error: str = ""


@dataclass(kw_only=True)
class ApplyProgress(Event):
    kind: ClassVar[str] = "apply_progress"
    line: str = ""


@dataclass(kw_only=True)
class Applied(Event):
    kind: ClassVar[str] = "applied"
    kernels: list[str] = field(default_factory=list)
    speedups: dict[str, float | None] = field(default_factory=dict)


@dataclass(kw_only=True)
class RunEnded(Event):
    kind: ClassVar[str] = "run_end"
    wall_s: float = 0.0
    tasks: int = 0
    winners: int = 0


@dataclass(kw_only=True)
class PhaseTimed(Event):
    kind: ClassVar[str] = "phase"
    phase: str = ""  # a key of kernforge.phases.PHASES
    seconds: float = 0.0
    task: str = ""  # the task it was spent on, or "" for the run's own phases


@dataclass(kw_only=True)
class PhaseStarted(Event):
    """What the run is doing now, for a status line and the dashboard's header; its end is the
    matching `phase` event (or the next phase_start)."""
    kind: ClassVar[str] = "phase_start"
    phase: str = ""  # a key of kernforge.phases.PHASES
    done: int | None = None  # work of the phase finished (tasks, for baselines and candidates); None: not counted
    total: int | None = None
    task: str = ""  # the task it works on, or "" for the run's own phases


@dataclass(kw_only=True)
class UnknownEvent(Event):
    """A line of a kind this kernforge does not know (a newer one wrote it): kept, not fatal."""
    name: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "kind": self.name, **self.data}


EVENTS: dict[str, type[Event]] = {cls.kind: cls for cls in (
    RunStarted, Captured, TasksChosen, Resumed, TaskStarted, NodeStarted, NodeFinished, ProposalFailed,
    Confirmed, SearchStopped, TaskEnded, ApplyProgress, Applied, RunEnded, PhaseTimed, PhaseStarted)}


def event_from_json(data: dict[str, Any]) -> Event:
    """A record read back; fields this version does not know are dropped, missing ones defaulted,
    and a value of the wrong type (a hand-edited or damaged line) is its field's default, so that
    no reader has to check what it is given."""
    kind = str(data.get("kind", ""))
    when = data.get("time")
    stamp = {"time": float(when)} if isinstance(when, (int, float)) and not isinstance(when, bool) else {}
    cls = EVENTS.get(kind)
    if cls is None:
        return UnknownEvent(name=kind, data={k: v for k, v in data.items() if k not in ("kind", "time")}, **stamp)
    types = _field_types(cls)
    return cls(**{k: v for k, v in data.items() if k in types and _fits(v, types[k])}, **stamp)


@lru_cache(maxsize=None)
def _field_types(cls: type[Event]) -> dict[str, tuple[type, ...]]:
    """Each field's accepted Python types, from its annotation (`float | None` -> float, int, None)."""
    hints = get_type_hints(cls)
    accepted: dict[str, tuple[type, ...]] = {}
    for f in fields(cls):
        if f.name == "time":
            continue
        options = get_args(hints[f.name]) if get_origin(hints[f.name]) in (Union, UnionType) else (hints[f.name],)
        plain = tuple(get_origin(o) or o for o in options)
        accepted[f.name] = plain + ((int,) if float in plain else ())
    return accepted


def _fits(value: Any, accepted: tuple[type, ...]) -> bool:
    if value is None:
        return type(None) in accepted
    if isinstance(value, bool):
        return bool in accepted
    return isinstance(value, accepted)


@dataclass
class EventTail:
    """Reads an events.jsonl as it grows: each call returns the events of the lines completed since
    the last one. A line still being written (no newline yet) waits for the next call; a line that
    is not JSON (a disk that filled, a torn write) is counted in `unreadable` and skipped."""

    path: Path
    offset: int = 0
    unreadable: int = 0

    def read_new(self) -> list[Event]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return []  # not written yet
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        events = []
        for line in chunk[:end].splitlines():
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                events.append(event_from_json(data if isinstance(data, dict) else {}))
            except (ValueError, TypeError):
                self.unreadable += 1
        return events


def read_events(path: Path) -> list[Event]:
    """Every complete event of a log (see EventTail)."""
    return EventTail(path).read_new()
