"""One task's search: baseline first, then the strategy's loop, every step written to the run folder."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernforge.backends import Backend
from kernforge.evaluate import Baseline, EvalResult, evaluate_baseline, evaluate_candidate
from kernforge.evaluate.executors import Executor, LocalExecutor
from kernforge.evaluate.runner import discard_reference
from kernforge.propose import Failure, Proposal, Proposer
from kernforge.search.strategy import Strategy
from kernforge.store import RunStore
from kernforge.tasks import KernelTask, save_task

BASELINE_TIMEOUT_S = 600.0
# Candidates timed again at the end of a task's search, one at a time: during the search,
# candidates are timed while others build and check, and on an H200 with 8 in flight the same
# kernel measured 0.0186 ms in one search and 0.058 ms in another.
FINALISTS = 3


@dataclass
class Node:
    node_id: str
    parent_id: str | None
    proposal: Proposal
    result: EvalResult
    kept: bool = False
    confirmed: EvalResult | None = None  # its finalist's re-evaluation, when it was one

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

    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.result.status] = counts.get(n.result.status, 0) + 1
        return counts


@dataclass
class SearchContext:
    task: KernelTask
    iterations: int  # the task's whole budget, nodes from before a resume included
    propose: Callable[[Node | None], Proposal | None]
    # (proposal, parent, decide) -> a handle: starts evaluating one candidate in a worker and
    # returns at once. Up to `parallel` run at the same time.
    start: Callable[[Proposal, Node | None, Callable[[Node], bool]], Any]
    # () -> (handle, node): waits for any started candidate to finish; decide(node) has said
    # whether the strategy keeps it, and the node is recorded.
    wait_any: Callable[[], tuple[Any, Node]]
    parallel: int = 1
    previous: list[Node] = field(default_factory=list)  # recorded before a resume, in order
    evaluated: int = 0  # nodes so far, previous ones included
    running: int = 0  # started and not yet finished

    def launch(self, proposal: Proposal, parent: Node | None, decide: Callable[[Node], bool]) -> Any:
        handle = self.start(proposal, parent, decide)
        self.running += 1
        return handle

    def next_done(self) -> tuple[Any, Node]:
        handle, node = self.wait_any()
        self.running -= 1
        self.evaluated += 1
        return handle, node

    def evaluate(self, proposal: Proposal, parent: Node | None, decide: Callable[[Node], bool]) -> Node:
        """One candidate, waited for: for a strategy with nothing else in flight (the next
        finished candidate must be this one)."""
        assert self.running == 0, "evaluate() beside launched candidates: use launch() and next_done()"
        self.launch(proposal, parent, decide)
        return self.next_done()[1]

    def budget_left(self) -> int:
        """Candidates that may still be started: the running ones are already spent."""
        return self.iterations - self.evaluated - self.running


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
    previous: list[Node] | None = None,
    executor: Executor | None = None,
    finalists: int = FINALISTS,
    on_confirm: Callable[[TaskOutcome, Node], None] = lambda outcome, node: None,
) -> TaskOutcome:
    """Search one task; `previous` holds the nodes a killed run had recorded (see --resume).
    The executor says where workers run and how many at once (default: one, here). When the
    budget is spent, the `finalists` best candidates are evaluated again one at a time, and
    only those second results decide the task's best (TaskOutcome.best)."""
    executor = executor or LocalExecutor(None, 1, None)
    task_dir = store.task_dir(task.task_id)
    task_path = task_dir / "task.json"
    reference_path = task_dir / "reference.pt"
    save_task(task, task_path)
    store.db.set_task_state(task.task_id, "running")
    try:
        baseline = evaluate_baseline(task_path, reference_path, device, task_dir / "baseline",
                                     BASELINE_TIMEOUT_S, compile_modes, executor)
    except RuntimeError as e:
        store.db.set_task_state(task.task_id, "done")
        return TaskOutcome(task=task, baseline=None, error=str(e).splitlines()[0])
    store.write_json(f"tasks/{task.task_id}/baseline.json", asdict(baseline))
    store.append_event("task_start", task=task.task_id, op=task.op, shape=task.shape_text,
                       eager_p50_ms=baseline.eager.p50_ms if baseline.eager else None,
                       resumed_nodes=len(previous or []))
    outcome = TaskOutcome(task=task, baseline=baseline, nodes=list(previous or []))
    tried: list[Proposal] = [n.proposal for n in outcome.nodes]
    failures: list[Failure] = [Failure(n.proposal, n.result.status, n.result.reason)
                               for n in outcome.nodes if not n.result.ok]
    # After the ids of the recorded nodes: with several in flight when a run was killed, a lost
    # one can leave a gap (n0002 lost, n0003 recorded), which a new node must not fill.
    next_id = 1 + max((int(n.node_id[1:]) for n in outcome.nodes), default=-1)

    def propose(parent: Node | None) -> Proposal | None:
        proposal = proposer.propose(task, backend.name, parent.proposal if parent else None, tried, failures)
        if proposal is not None:
            tried.append(proposal)
        return proposal

    def start(proposal: Proposal, parent: Node | None) -> tuple[str, Path]:
        nonlocal next_id
        node_id = f"n{next_id:04d}"
        next_id += 1
        node_dir = store.node_dir(task.task_id, node_id)
        source = node_dir / f"candidate{backend.source_suffix}"
        source.write_text(proposal.source)
        store.write_json(f"tasks/{task.task_id}/nodes/{node_id}/proposal.json",
                         {"parent": parent.node_id if parent else None, "rationale": proposal.rationale,
                          "params": proposal.params, "changes": proposal.changes})
        store.append_event("node_start", task=task.task_id, node=node_id, parent=parent.node_id if parent else None)
        return node_id, source

    def finish(node: Node, decide: Callable[[Node], bool]) -> None:
        node.kept = decide(node)
        outcome.nodes.append(node)
        result = node.result
        if not result.ok:
            failures.append(Failure(node.proposal, result.status, result.reason))
        store.write_json(f"tasks/{task.task_id}/nodes/{node.node_id}/result.json",
                         {**result.to_json(), "kept": node.kept})
        store.record_node(task.task_id, node.node_id, node.parent_id, node.proposal, result, node.kept,
                          backend.source_suffix)
        store.append_result(row_of(task, node))
        store.append_event("node", task=task.task_id, node=node.node_id, parent=node.parent_id,
                           status=result.status, reason=result.reason[:300], kept=node.kept,
                           speedup_vs_eager=result.speedup_vs_eager, rationale=node.proposal.rationale)
        if node.kept:
            store.commit_kept(task.task_id, node.proposal.source, backend.source_suffix, _commit_message(node))
        on_node(outcome, node)

    def run(proposal: Proposal, parent: Node | None, node_id: str, source: Path) -> Node:
        result = evaluate_candidate(task_path, reference_path, source, backend.name, device,
                                    source.parent, candidate_timeout_s, executor)
        return Node(node_id=node_id, parent_id=parent.node_id if parent else None, proposal=proposal, result=result)

    # Workers run on threads; each node is recorded here, on the strategy's thread, as soon as
    # its worker is done, so that a kill loses only the candidates still running.
    pool = ThreadPoolExecutor(max_workers=max(1, executor.capacity))
    running: dict[Future, Callable[[Node], bool]] = {}

    def start_one(proposal: Proposal, parent: Node | None, decide: Callable[[Node], bool]) -> Future:
        future = pool.submit(run, proposal, parent, *start(proposal, parent))
        running[future] = decide
        return future

    def wait_any() -> tuple[Future, Node]:
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        future = min(done, key=lambda f: f.result().node_id)  # several at once: in id order
        node = future.result()
        finish(node, running.pop(future))
        return future, node

    def confirm(node: Node) -> None:
        node_dir = store.node_dir(task.task_id, node.node_id)
        out_dir = node_dir / "confirm"
        out_dir.mkdir(parents=True, exist_ok=True)
        node.confirmed = evaluate_candidate(task_path, reference_path, node_dir / f"candidate{backend.source_suffix}",
                                            backend.name, device, out_dir, candidate_timeout_s, executor)
        store.write_json(f"tasks/{task.task_id}/nodes/{node.node_id}/confirm.json", node.confirmed.to_json())
        store.append_event("confirm", task=task.task_id, node=node.node_id, status=node.confirmed.status,
                           reason=node.confirmed.reason[:300], speedup_vs_eager=node.confirmed.speedup_vs_eager,
                           search_speedup_vs_eager=node.result.speedup_vs_eager)
        on_confirm(outcome, node)

    ctx = SearchContext(task=task, iterations=iterations, propose=propose, start=start_one, wait_any=wait_any,
                        parallel=executor.capacity, previous=list(outcome.nodes), evaluated=len(outcome.nodes))
    try:
        strategy.run(ctx)
        for node in pick_finalists(outcome.nodes, finalists):
            if node.confirmed is None:  # a resumed task keeps the re-evaluations it finished
                confirm(node)
        store.db.set_task_state(task.task_id, "done")
    finally:
        # on an error or a kill, the candidates still running are lost (a resume redoes them);
        # their workers are let finish so that none outlives the reference below
        pool.shutdown(wait=True, cancel_futures=True)
        store.append_event("task_end", task=task.task_id, candidates=len(outcome.nodes),
                           counts=outcome.status_counts())
        # The oracle outputs are large (float64, several input sets) and can be
        # recomputed from the saved samples; the run folder keeps what it must.
        discard_reference(reference_path)
    return outcome


def pick_finalists(nodes: list[Node], count: int) -> list[Node]:
    """The `count` correct, timed candidates with the best speedups over their own eager."""
    timed = [n for n in nodes if n.result.ok and n.result.speedup_vs_eager is not None]
    return sorted(timed, key=lambda n: n.result.speedup_vs_eager, reverse=True)[:count]


def previous_nodes(store: RunStore, task_id: str) -> list[Node]:
    """The nodes a task recorded before the run stopped, rebuilt from the database and the files,
    in the order they finished: with several in flight, the strategies decided in that order (a
    later id can have been kept before an earlier one beat it), so a rebuilt tree or greedy's
    last kept node must see them so too."""
    nodes = []
    for rec in sorted(store.db.nodes(task_id), key=lambda r: r.finished):
        path = store.root / rec.source_path
        source = path.read_text() if path.exists() else ""
        proposal = Proposal(source=source, rationale=rec.rationale, params=rec.params.get("params", {}),
                            changes=rec.params.get("changes", {}))
        confirm = store.root / "tasks" / task_id / "nodes" / rec.node / "confirm.json"
        confirmed = EvalResult.from_json(json.loads(confirm.read_text())) if confirm.is_file() else None
        nodes.append(Node(node_id=rec.node, parent_id=rec.parent, proposal=proposal,
                          result=EvalResult.from_json(rec.result), kept=rec.kept, confirmed=confirmed))
    return nodes


def _commit_message(node: Node) -> str:
    r = node.result
    speed = f"{r.speedup_vs_eager:.3f}x vs eager" if r.speedup_vs_eager else "correct, not timed"
    timing = f" (p50 {r.timing.p50_ms:.4f} ms, eager {r.eager.p50_ms:.4f} ms)" if r.timing and r.eager else ""
    return f"{node.node_id}: {speed}{timing}\n\n{node.proposal.rationale}\n"


def row_of(task: KernelTask, node: Node) -> dict[str, Any]:
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


