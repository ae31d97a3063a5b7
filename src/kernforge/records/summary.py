"""summary.json as records: the run (RunSummary) and one TaskRow per task, its best kernel and
what came of it.

optimize writes it when the search ends, `kernforge add` makes a task's row again and `apply`
adds its report; `show`, `ls`, the result table and the dashboard read it. to_json writes the
keys summary.json always had (plus a row's `status`); from_json reads the file of any earlier
kernforge: missing keys take their defaults, a row's status is read from its verdict's opening
words, and keys this version does not know are kept and written back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, cast

from kernforge.records.endtoend import EndToEnd
from kernforge.records.evaluation import Status
from kernforge.records.task import RealInputs

# What came of a task, in short; `verdict` says it in words, with why and any notes.
TaskStatus = Literal["faster", "no faster", "not timed", "no correct", "not searched"]

# The words each status's verdict opens with, as summary.json has always said them.
VERDICT_OPENINGS: dict[TaskStatus, str] = {
    "faster": "faster kernel found",
    "no faster": "no faster kernel found",
    "not timed": "correct kernel found (interpreter: not timed)",
    "no correct": "no correct kernel found",
    "not searched": "not searched",
}


@dataclass(frozen=True)
class Finalist:
    """A finalist's second evaluation, alone, beside the search's figure for it."""

    search_speedup_vs_eager: float | None
    status: Status  # its re-evaluation's
    speedup_vs_eager: float | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finalist:
        return cls(search_speedup_vs_eager=data.get("search_speedup_vs_eager"),
                   status=cast(Status, str(data.get("status", ""))),
                   speedup_vs_eager=data.get("speedup_vs_eager"))


@dataclass(frozen=True)
class TaskRow:
    task: str
    op: str
    shape: str
    dtype: str
    share: float  # of the model's op time
    eager_p50_ms: float | None = None
    best_p50_ms: float | None = None
    # 1.0 where correct kernels were timed and none beat eager beyond the noise; None: none was timed
    best_speedup_vs_eager: float | None = None
    best_node: str | None = None
    compile_p50_ms: float | None = None
    best_speedup_vs_compile: float | None = None
    # the compile peer: timed, failed, skipped (no candidate beat eager), not timed yet, or not asked
    # (records.evaluation.Baseline.peer_state)
    compile_peer: str = ""
    finalists: dict[str, Finalist] = field(default_factory=dict)  # node -> its re-evaluation
    status: TaskStatus = "not searched"
    verdict: str = ""  # the status in words, with the commonest failure, drawn inputs, an early stop
    real_inputs: RealInputs = "all"
    candidates: int = 0
    correct: int = 0
    status_counts: dict[str, int] = field(default_factory=dict)  # EvalResult status -> candidates
    error: str = ""  # why the task was not searched
    stopped: str = ""  # why its search ended
    seeded_from: str = ""  # the sibling's task/node its search started from, or ""

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["finalists"] = {node: vars(f).copy() for node, f in self.finalists.items()}
        data["status_counts"] = dict(self.status_counts)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskRow:
        verdict = str(data.get("verdict", ""))
        known = {f.name for f in fields(cls)} - {"finalists", "status", "verdict"}
        return cls(**{k: v for k, v in data.items() if k in known},
                   status=data.get("status") or status_of(verdict), verdict=verdict,
                   finalists={node: Finalist.from_json(f) for node, f in (data.get("finalists") or {}).items()})


def status_of(verdict: str) -> TaskStatus:
    """The status a verdict written before rows carried one opens with ("faster kernel found;
    stopped early: ..." is "faster")."""
    return next((status for status, words in VERDICT_OPENINGS.items() if verdict.startswith(words)),
                "not searched")


@dataclass
class RunSummary:
    run_dir: str = ""
    model: str = ""
    backend: str = ""
    device: str = ""
    wall_s: float = 0.0  # the search's, apply not included
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase (kernforge.phases)
    tasks: list[TaskRow] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # hotter ops not searched: op, signature, share, reason
    llm: dict[str, Any] | None = None  # the LLM's model and usage, where one was used
    end_to_end: EndToEnd | None = None  # apply's report (or why it failed), once applied
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # keys a newer kernforge wrote

    def to_json(self) -> dict[str, Any]:
        data = {"run_dir": self.run_dir, "model": self.model, "backend": self.backend, "device": self.device,
                "wall_s": self.wall_s, "phases": dict(self.phases), "tasks": [t.to_json() for t in self.tasks],
                "skipped": list(self.skipped)}
        if self.llm is not None:
            data["llm"] = self.llm
        if self.end_to_end is not None:
            data["end_to_end"] = self.end_to_end.to_json()
        return data | self.extra

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunSummary:
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(run_dir=str(data.get("run_dir", "")), model=str(data.get("model", "")),
                   backend=str(data.get("backend", "")), device=str(data.get("device", "")),
                   wall_s=float(data.get("wall_s") or 0.0), phases=dict(data.get("phases") or {}),
                   tasks=[TaskRow.from_json(t) for t in data.get("tasks") or [] if isinstance(t, dict)],
                   skipped=[s for s in data.get("skipped") or [] if isinstance(s, dict)], llm=data.get("llm"),
                   end_to_end=EndToEnd.read(data.get("end_to_end")),
                   extra={k: v for k, v in data.items() if k not in known})
