"""A task's search as records: its nodes (one evaluated candidate each) and its outcome.

search makes them as candidates finish (search/engine.py) and rebuilds them from the run folder
where a run stopped (search/nodes.py, previous_nodes); optimize, integrate and the report read
which node won (TaskOutcome.best).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernforge.records.evaluation import Baseline, EvalResult, Status
from kernforge.records.proposal import Proposal
from kernforge.records.task import KernelTask


@dataclass
class Node:
    node_id: str
    parent_id: str | None
    proposal: Proposal
    result: EvalResult
    kept: bool = False
    confirmed: EvalResult | None = None  # its finalist's re-evaluation, when it was one
    repair_depth: int = 0  # failed candidates in a row ending here (0: this one is correct)

    @property
    def final(self) -> EvalResult:
        """The result that counts: the finalist's re-evaluation where there is one."""
        return self.confirmed or self.result


@dataclass
class TaskOutcome:
    task: KernelTask
    baseline: Baseline | None
    nodes: list[Node] = field(default_factory=list)
    error: str = ""  # why the task could not be searched at all
    # why its search ended, always said once it has: the budget spent, nothing new to try, a
    # limit on failed proposals, an LLM budget, a baseline that failed, a seeded start that
    # nothing improved on (search.engine.search_ended)
    stopped: str = ""
    seeded_from: str = ""  # the sibling's task and node it started from (Seed.label), or ""

    @property
    def best(self) -> Node | None:
        """The fastest correct candidate that beat eager beyond the noise, if any. Once finalists
        were re-evaluated, only they count, by their second result: a kernel must pass its
        checks twice and beat eager twice, the second time with nothing else running."""
        finalists = [n for n in self.nodes if n.confirmed is not None]
        if finalists:
            faster = [n for n in finalists if n.confirmed.ok and n.confirmed.faster_than_eager]
            return max(faster, key=lambda n: n.confirmed.speedup_vs_eager) if faster else None
        faster = [n for n in self.nodes if n.result.ok and n.result.faster_than_eager]
        return min(faster, key=lambda n: n.result.timing.p50_ms) if faster else None

    @property
    def correct(self) -> list[Node]:
        return [n for n in self.nodes if n.result.ok]

    def status_counts(self) -> dict[Status, int]:
        counts: dict[Status, int] = {}
        for n in self.nodes:
            counts[n.result.status] = counts.get(n.result.status, 0) + 1
        return counts
