"""One task's search: baseline first, then the strategy's loop, every step written to the run folder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from kernforge.backends import Backend
from kernforge.evaluate import Baseline, EvalResult, evaluate_baseline, evaluate_candidate
from kernforge.evaluate.runner import discard_reference
from kernforge.propose import Proposal, Proposer
from kernforge.search.strategy import Strategy
from kernforge.store import RunStore
from kernforge.tasks import KernelTask, save_task

BASELINE_TIMEOUT_S = 600.0


@dataclass
class Node:
    node_id: str
    parent_id: str | None
    proposal: Proposal
    result: EvalResult
    kept: bool = False


@dataclass
class TaskOutcome:
    task: KernelTask
    baseline: Baseline | None
    nodes: list[Node] = field(default_factory=list)
    error: str = ""  # why the task could not be searched at all

    @property
    def best(self) -> Node | None:
        """The fastest correct candidate that beat eager beyond the noise, if any."""
        faster = [n for n in self.nodes if n.result.ok and n.result.faster_than_eager]
        return min(faster, key=lambda n: n.result.timing.p50_ms) if faster else None

    @property
    def correct(self) -> list[Node]:
        return [n for n in self.nodes if n.result.ok]

    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.result.status] = counts.get(n.result.status, 0) + 1
        return counts


@dataclass
class SearchContext:
    task: KernelTask
    iterations: int
    propose: Callable[[Node | None], Proposal | None]
    # (proposal, parent, keep_if) -> the evaluated node; keep_if(node) decides whether
    # the strategy keeps it, before the node's row is written.
    evaluate: Callable[[Proposal, Node | None, Callable[[Node], bool]], Node]


def search_task(
    task: KernelTask,
    store: RunStore,
    backend: Backend,
    device: str,
    proposer: Proposer,
    strategy: Strategy,
    iterations: int,
    candidate_timeout_s: float,
    on_node: Callable[[TaskOutcome, Node], None] = lambda outcome, node: None,
    compile_modes: tuple[str, ...] = (),
) -> TaskOutcome:
    task_dir = store.task_dir(task.task_id)
    task_path = task_dir / "task.json"
    reference_path = task_dir / "reference.pt"
    save_task(task, task_path)
    try:
        baseline = evaluate_baseline(task_path, reference_path, device, task_dir / "baseline",
                                     BASELINE_TIMEOUT_S, compile_modes)
    except RuntimeError as e:
        return TaskOutcome(task=task, baseline=None, error=str(e).splitlines()[0])
    store.write_json(f"tasks/{task.task_id}/baseline.json", asdict(baseline))
    store.append_event("task_start", task=task.task_id, op=task.op, shape=task.shape_text,
                       eager_p50_ms=baseline.eager.p50_ms if baseline.eager else None)
    outcome = TaskOutcome(task=task, baseline=baseline)
    tried: list[Proposal] = []

    def propose(parent: Node | None) -> Proposal | None:
        proposal = proposer.propose(task, backend.name, parent.proposal if parent else None, tried)
        if proposal is not None:
            tried.append(proposal)
        return proposal

    def evaluate(proposal: Proposal, parent: Node | None, keep_if: Callable[[Node], bool]) -> Node:
        node_id = f"n{len(outcome.nodes):04d}"
        node_dir = store.node_dir(task.task_id, node_id)
        source = node_dir / f"candidate{backend.source_suffix}"
        source.write_text(proposal.source)
        store.write_json(f"tasks/{task.task_id}/nodes/{node_id}/proposal.json",
                         {"parent": parent.node_id if parent else None,
                          "rationale": proposal.rationale, "params": proposal.params})
        result = evaluate_candidate(task_path, reference_path, source, backend.name, device, node_dir,
                                    candidate_timeout_s)
        node = Node(node_id=node_id, parent_id=parent.node_id if parent else None,
                    proposal=proposal, result=result)
        node.kept = keep_if(node)
        outcome.nodes.append(node)
        store.append_event("node", task=task.task_id, node=node_id, parent=node.parent_id,
                           status=result.status, reason=result.reason[:300], kept=node.kept,
                           speedup_vs_eager=result.speedup_vs_eager, rationale=proposal.rationale)
        if node.kept:
            store.commit_kept(task.task_id, proposal.source, backend.source_suffix, _commit_message(node))
        store.write_json(f"tasks/{task.task_id}/nodes/{node_id}/result.json",
                         {**result.to_json(), "kept": node.kept})
        store.append_result(_row(task, node))
        on_node(outcome, node)
        return node

    try:
        strategy.run(SearchContext(task=task, iterations=iterations, propose=propose,
                                   evaluate=evaluate))
    finally:
        store.append_event("task_end", task=task.task_id, candidates=len(outcome.nodes),
                           counts=outcome.status_counts())
        # The oracle outputs are large (float64, several input sets) and can be
        # recomputed from the saved samples; the run folder keeps what it must.
        discard_reference(reference_path)
    return outcome


def _commit_message(node: Node) -> str:
    r = node.result
    speed = f"{r.speedup_vs_eager:.3f}x vs eager" if r.speedup_vs_eager else "correct, not timed"
    timing = f" (p50 {r.timing.p50_ms:.4f} ms, eager {r.eager.p50_ms:.4f} ms)" if r.timing and r.eager else ""
    return f"{node.node_id}: {speed}{timing}\n\n{node.proposal.rationale}\n"


def _row(task: KernelTask, node: Node) -> dict[str, Any]:
    r = node.result
    return {
        "task": task.task_id, "node": node.node_id, "parent": node.parent_id or "",
        "status": r.status, "failure_reason": r.reason,
        "p50_ms": r.timing.p50_ms if r.timing else None,
        "p20_ms": r.timing.p20_ms if r.timing else None,
        "p80_ms": r.timing.p80_ms if r.timing else None,
        "eager_p50_ms": r.eager.p50_ms if r.eager else None,
        "speedup_vs_eager": r.speedup_vs_eager, "faster_than_eager": r.faster_than_eager,
        "kept": node.kept, "eval_s": r.wall_s, "rationale": node.proposal.rationale,
    }


