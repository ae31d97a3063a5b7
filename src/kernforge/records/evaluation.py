"""A candidate's evaluation (EvalResult) and its task's baseline (Baseline) as records.

evaluate makes them from what a worker wrote (evaluate/runner.py) and judges; search keeps them
per node and per task; the run folder holds them as a node's result (the database, confirm.json)
and a task's baseline.json, which read back here with every key an older kernforge wrote.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from kernforge.records.timing import Timing

# What a candidate's evaluation came to: correct, or the first way it failed.
Status = Literal["ok", "compile_error", "runtime_error", "wrong_result", "cheat", "out_of_memory", "crash", "timeout"]
STATUSES: tuple[Status, ...] = get_args(Status)
# One input set's verdict: its values passed, failed (or a rejection names it), or were not compared
SetVerdict = Literal["pass", "fail", ""]


@dataclass
class EvalResult:
    status: Status
    reason: str = ""
    errors: list[list[float]] = field(default_factory=list)  # per input set, per output
    timing: Timing | None = None
    eager: Timing | None = None  # eager, timed in the same worker just before the candidate
    speedup_vs_eager: float | None = None
    faster_than_eager: bool = False  # beyond the measured noise
    log_tail: str = ""
    wall_s: float = 0.0  # the worker's whole life: start, build, checks, timing
    # What the search waited for this result: the scan, every worker run (a retime's too) and the
    # judging here; what a budgeted task's next candidate is expected to take (search/engine.py)
    evaluation_s: float = 0.0
    # seconds per step inside the worker, and "judge": this process's judgement of its outputs
    phases: dict[str, float] = field(default_factory=dict)
    # eager's median before the candidate loaded and right after its timing; `eager` is the faster
    eager_before_after_ms: list[float] = field(default_factory=list)
    failed_check: str = ""  # the key in judge.CHECKS of the check that rejected it ("" when ok)
    # per input set (the baseline's labels); empty where judging never began (a build or run failure)
    set_verdicts: list[SetVerdict] = field(default_factory=list)
    # Why the first measurement was not believed and the candidate was measured again (its
    # clocks disagreed with this process's once, not twice, or the machine was busy); "" when
    # measured once
    retimed: str = ""
    # Why this result carries no timing although the candidate is correct: the machine was busy
    # in both runs (another process held the worker's core); "" when timed or not timeable
    noisy: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def timed(self) -> bool:
        return self.timing is not None

    @property
    def waited_s(self) -> float:
        """What the search waited for this result (the worker's wall in results of old runs)."""
        return self.evaluation_s or self.wall_s

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EvalResult:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for key in ("timing", "eager"):
            fields[key] = Timing(**data[key]) if data.get(key) else None
        return cls(**fields)

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["timing"] = self.timing.__dict__ if self.timing else None
        data["eager"] = self.eager.__dict__ if self.eager else None
        data["timed"] = self.timed
        return data


# Why a task's compile peer has no time: it is timed only where it can decide something, whether
# a kernel that beats eager beats torch.compile too (search/engine.py, TaskJobs.time_peers).
PEER_PENDING = "not timed yet (timed once a candidate beats eager)"
PEER_SKIPPED = "skipped: no candidate beat eager"


@dataclass
class Baseline:
    eager: Timing | None
    device_name: str
    labels: list[str]
    eager_errors: list[list[float]]
    # torch.compile of the op alone, per mode: {"timing": Timing-dict or None, "error": str}; {}
    # until timed, which is once a candidate beats eager (search/engine.py, TaskJobs.time_peers)
    compiled: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The modes the run asks for (--compile); [] in records from before peers were timed on demand,
    # which timed every mode asked in the baseline worker (so `compiled` holds them all)
    compile_modes: list[str] = field(default_factory=list)
    # The machine's facts for the proposer's prompt (evaluate.hardware); {} from baselines before them
    hardware: dict[str, Any] = field(default_factory=dict)
    # Seconds of the baseline's wall time in each run phase (baselines, oracle, compile_peers:
    # kernforge.phases); {} from baselines before them
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def compiled_p50_ms(self) -> float | None:
        """torch.compile's default mode on the op alone, where it was timed."""
        entry = self.compiled.get("default")
        return entry["timing"]["p50_ms"] if entry and entry.get("timing") else None

    @property
    def peers_wanted(self) -> bool:
        """The run asks for torch.compile peers and they are not timed yet."""
        return bool(self.compile_modes) and not self.compiled

    def peer_state(self, task_done: bool) -> str:
        """Whether the compile peer was timed, in a few words, for the summary and `show`."""
        if self.compiled:
            errors = [f"{mode}: {e['error']}" for mode, e in self.compiled.items() if not e.get("timing")]
            return "failed: " + "; ".join(errors) if errors else "timed"
        if not self.compile_modes:
            return "not asked (--compile none)"
        return PEER_SKIPPED if task_done else PEER_PENDING

    def to_json(self) -> dict[str, Any]:
        """baseline.json."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Baseline:
        return cls(**{**data, "eager": Timing(**data["eager"]) if data.get("eager") else None})
