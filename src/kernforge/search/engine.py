"""One task's search: baseline first, then the strategy's loop, every step written to the run folder."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernforge.backends import Backend
from kernforge.errors import strict
from kernforge.evaluate import evaluate_baseline, evaluate_candidate, evaluate_peers
from kernforge.evaluate.executors import LocalExecutor
from kernforge.evaluate.jobs import Executor
from kernforge.evaluate.runner import discard_reference, stop_workers
from kernforge.phases import Stopwatch
from kernforge.propose import Proposer
from kernforge.propose.context import Attempt, ProposalContext, Seed, TaskFacts, task_facts
from kernforge.records.evaluation import Baseline, Status
from kernforge.records.nodes import Node, TaskOutcome
from kernforge.records.proposal import Failure, NoProposal, Proposal
from kernforge.records.task import KernelTask
from kernforge.search.budget import CONFIRM_FACTOR, PLATEAU, candidate_fits
from kernforge.search.nodes import BUDGET_SPENT, repair_depth, row_of
from kernforge.search.runs import read_baseline
from kernforge.search.siblings import task_seed
from kernforge.search.strategy import Strategy
from kernforge.store import RunStore
from kernforge.store.events import (Confirmed, NodeFinished, NodeStarted, PhaseStarted, PhaseTimed, ProposalFailed,
                                    SearchStopped, TaskEnded, TaskStarted)
from kernforge.tasks import save_task

BASELINE_TIMEOUT_S = 600.0
# torch.compile of one op: ~13 s on a 2-core CPU, max-autotune minutes on a GPU; then its timing.
PEERS_TIMEOUT_S = 900.0
# Candidates timed again at the end of a task's search, one at a time: during the search,
# candidates are timed while others build and check, and on an H200 with 8 in flight the same
# kernel measured 0.0186 ms in one search and 0.058 ms in another.
FINALISTS = 3


# Proposals in a row that came back with nothing (an endpoint down, replies with no code) before
# a task's search ends: each is retried, after its retry_after_s, but a run left overnight must
# not spin on a dead endpoint.
MAX_FAILED_PROPOSALS = 6

# Candidates in a row that are not kept before a task seeded from a sibling's winner stops: the
# seeded start is a found kernel, so what is left is local tuning, and a point of the built-in
# spaces has about four neighbours that matter (a block, warps, a vector width, the variant).
# An unseeded task, or one whose seed had not beaten eager, uses its whole budget.
SEEDED_PATIENCE = 4


@dataclass
class SearchContext:
    """What a strategy drives one task's search through:
      launch(parent, decide)  asks for a candidate expanding `parent` (None: a first one) and
                              starts evaluating it in a worker; returns a handle at once, or the
                              NoProposal when an inline proposer had nothing (up to `parallel`
                              in flight; a proposer that is not inline thinks inside the handle);
      next_done()             waits for any launched one: (handle, Node or NoProposal); a Node
                              is recorded and decide(node) has said whether the strategy keeps it;
      budget_left()           how many candidates may still be started (0 once stopped);
      wants_repair(node)      whether the proposer repairs this failed node next;
      report_tree(stats)      the strategy's view of its tree (visits, subtree values, nodes
                              passed over), written to tasks/<task>/tree.json for a dashboard;
      previous                the nodes recorded before a resume, to start from.
    A task seeded from a sibling's winner (`patience` > 0) stops once that many candidates in a
    row after a kept one were not kept: `stopped` then says so."""

    task: Any
    iterations: int  # the task's whole budget, nodes from before a resume included
    # parent -> a Proposal or NoProposal: asks the proposer, blocking.
    propose: Callable[[Node | None], Proposal | NoProposal]
    # (parent, decide, proposal or None) -> a handle: starts one job and returns at once. With
    # None the job asks propose(parent) itself, on its own thread, before it evaluates.
    start: Callable[[Node | None, Callable[[Node], bool], Proposal | None], Any]
    # () -> (handle, Node | NoProposal): waits for any started job to finish.
    wait_any: Callable[[], tuple[Any, Any]]
    parallel: int = 1
    inline: bool = True  # propose on the strategy's thread (the built-in proposer)
    repairs: int = 0  # the proposer repairs failed candidates, this many in a row
    previous: list[Node] = field(default_factory=list)  # recorded before a resume, in order
    evaluated: int = 0  # nodes so far, previous ones included
    running: int = 0  # started and not yet finished
    stopped: str = ""  # why no more candidates are started (an LLM budget spent...)
    failed_in_a_row: int = 0  # NoProposals of kind retry since the last proposal that came
    report_tree: Callable[[dict[str, Any]], None] = lambda stats: None
    patience: int = 0  # candidates in a row not kept before a seeded task stops (0: never)
    seeded_from: str = ""  # the seed's label, for the stop's reason
    # candidates since the last kept one; None until one is kept (a seed that failed here gives
    # no found point to stop at). A resumed task counts afresh: its budget may have been raised.
    since_kept: int | None = None
    # A run with a time budget (search/budget.py): no candidate is started after `deadline`
    # (time.perf_counter()), the task's share of the budget being `share_s`.
    deadline: float | None = None
    share_s: float = 0.0
    confirm_factor: float = CONFIRM_FACTOR  # a confirmation's time in candidates' (budget.FixedCosts)
    eval_s: list[float] = field(default_factory=list)  # finished candidates' evaluation times, this session

    @property
    def eval_estimate_s(self) -> float | None:
        """A candidate's evaluation time as this task's finished ones took it (their mean)."""
        return sum(self.eval_s) / len(self.eval_s) if self.eval_s else None

    def __post_init__(self) -> None:
        if any(n.kept for n in self.previous):
            self.since_kept = 0

    def launch(self, parent: Node | None, decide: Callable[[Node], bool]) -> Any:
        if self.inline:
            proposal = self.propose(parent)
            if isinstance(proposal, NoProposal):
                self._note(proposal)
                return proposal
            handle = self.start(parent, decide, proposal)
        else:
            handle = self.start(parent, decide, None)
        self.running += 1
        return handle

    def next_done(self) -> tuple[Any, Any]:
        handle, outcome = self.wait_any()
        self.running -= 1
        if isinstance(outcome, NoProposal):
            self._note(outcome)
        else:
            self.evaluated += 1
            self.failed_in_a_row = 0
            self._count(outcome)
        return handle, outcome

    def expand(self, parent: Node | None, decide: Callable[[Node], bool]) -> Any:
        """One candidate, waited for: a Node, or the NoProposal that came instead (for a
        strategy with nothing else in flight: the next finished job must be this one)."""
        assert self.running == 0, "expand() beside launched candidates: use launch() and next_done()"
        launched = self.launch(parent, decide)
        if isinstance(launched, NoProposal):
            return launched
        return self.next_done()[1]

    def budget_left(self) -> int:
        """Candidates that may still be started: the running ones are already spent."""
        if not self.stopped and self.deadline is not None:
            left_s = self.deadline - time.perf_counter()
            if left_s <= 0 and self.evaluated + self.running == 0:
                return 1  # the baseline took the share: one candidate, or its cost bought nothing
            self._check_time(left_s)
        if self.stopped:
            return 0
        return self.iterations - self.evaluated - self.running

    def _check_time(self, left_s: float) -> None:
        """Stops the task where its share cannot hold another candidate and a confirmation."""
        if left_s <= 0:
            self.stopped = f"its {self.share_s:.0f} s share of the time budget spent"
        elif not candidate_fits(left_s, self.eval_estimate_s, self.confirm_factor):
            self.stopped = (f"its {self.share_s:.0f} s share of the time budget nearly spent: {_seconds(left_s)} s "
                            f"left, too little for another candidate ({_seconds(self.eval_estimate_s)} s each) "
                            f"and a finalist's confirmation ({self.confirm_factor:.1f}x)")

    def wants_repair(self, node: Node) -> bool:
        """A failed LLM candidate whose messages can guide a fix, while the line has had at most
        `repairs` repairs in a row (its repair_depth counts the failed nodes ending at it)."""
        return (self.repairs > 0 and node.result.status in REPAIRABLE and node.proposal.origin == "llm"
                and node.repair_depth <= self.repairs)

    def _count(self, node: Node) -> None:
        """A seeded task's patience: nothing kept in `patience` candidates after a kept one stops it.
        And the candidate's evaluation time, for a budgeted task's next start."""
        # all the search waited for (on the H100 a VAE group norm's candidate: worker 11 s of 47 s,
        # bench/results/h100/issue32/vae-20261207b)
        if node.result.waited_s > 0:
            self.eval_s.append(node.result.waited_s)
        if node.kept:
            self.since_kept = 0
        elif self.since_kept is not None:
            self.since_kept += 1
        if self.patience and (self.since_kept or 0) >= self.patience and not self.stopped:
            self.stopped = (f"seeded from {self.seeded_from}; no improvement in {self.since_kept}" if self.seeded_from
                            else f"stopped improving: no better candidate in the last {self.since_kept}")

    def _note(self, outcome: NoProposal) -> None:
        if outcome.kind == "budget":
            self.stopped = outcome.reason
        elif outcome.kind == "retry":
            self.failed_in_a_row += 1
            if self.failed_in_a_row >= MAX_FAILED_PROPOSALS:
                self.stopped = f"{self.failed_in_a_row} proposals in a row failed, the last: {outcome.reason}"


def _seconds(value: float | None) -> str:
    """Seconds as a reason shows them: a tenth under 10 s, whole ones above."""
    value = value or 0.0
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def search_ended(ctx: SearchContext, proposer: str) -> str:
    """Why a strategy returned, in one line: its iterations spent, a stop the context recorded
    (an LLM budget, proposals failing in a row), or a proposer with nothing new for any node."""
    done = f"{ctx.evaluated} of {ctx.iterations} iterations"
    if ctx.stopped:
        return f"{ctx.stopped} ({done})"
    if ctx.evaluated >= ctx.iterations:
        return f"{BUDGET_SPENT} ({done})"
    return f"nothing new to try: the {proposer} proposer had no new variant of any node ({done})"


def _patience(seeded: bool, deadline: float | None) -> int:
    """Candidates in a row not better than the best before the task stops (0: never): a task
    seeded from a sibling's winner, or any in a run with a time budget."""
    if seeded:
        return SEEDED_PATIENCE
    return PLATEAU if deadline is not None else 0


# Failures whose messages say what to fix; a crash or a time-out says little the generator can use.
REPAIRABLE: tuple[Status, ...] = ("compile_error", "runtime_error", "wrong_result", "cheat")


def search_task(
    task: KernelTask,
    store: RunStore,
    backend: Backend,
    device: str,
    proposer: Proposer,
    strategy: Strategy,
    iterations: int,
    candidate_timeout_s: float,
    compile_modes: tuple[str, ...] = (),
    previous: list[Node] | None = None,
    executor: Executor | None = None,
    finalists: int = FINALISTS,
    time_share_s: float | None = None,
    confirm_factor: float = CONFIRM_FACTOR,
) -> TaskOutcome:
    """Search one task; `previous` holds the nodes a killed run had recorded (see --resume).
    The executor says where workers run and how many at once (default: one, here). When the
    budget is spent, the `finalists` best candidates are evaluated again one at a time, and
    only those second results decide the task's best (TaskOutcome.best). A task with a sibling
    searched before it in the store starts from the sibling's best (siblings.py). A task of a run
    with a time budget has `time_share_s` seconds from now, its baseline included, and stops
    once it stopped improving (budget.py)."""
    deadline = None if time_share_s is None else time.perf_counter() + time_share_s
    executor = executor or LocalExecutor(None, 1, None)
    task_dir = store.task_dir(task.task_id)
    task_path = task_dir / "task.json"
    reference_path = task_dir / "reference.pt"
    save_task(task, task_path)
    store.db.set_task_state(task.task_id, "running")
    earlier = read_baseline(store, task.task_id)  # a resumed task's: its peers, where timed, are kept
    try:
        baseline = evaluate_baseline(task_path, reference_path, device, task_dir / "baseline",
                                     BASELINE_TIMEOUT_S, compile_modes, executor)
    except RuntimeError as e:
        store.db.set_task_state(task.task_id, "done")
        outcome = TaskOutcome(task=task, baseline=None, error=str(e).splitlines()[0], stopped="its baseline failed")
        store.emit(SearchStopped(task=task.task_id, reason=outcome.stopped))
        return outcome
    baseline.compiled = timed_peers(earlier, compile_modes)
    store.write_json(f"tasks/{task.task_id}/baseline.json", baseline.to_json())
    for phase, seconds in baseline.phases.items():
        store.emit(PhaseTimed(phase=phase, seconds=seconds, task=task.task_id))
    seed = task_seed(store, task, backend.name, resumed=bool(previous))
    store.emit(TaskStarted(task=task.task_id, op=task.op, shape=task.shape_text, dtype=task.dtype_text,
                           share=task.share, iterations=iterations,
                           eager_p50_ms=baseline.eager.p50_ms if baseline.eager else None,
                           compile_p50_ms=baseline.compiled_p50_ms, resumed_nodes=len(previous or []),
                           seeded_from=seed.label if seed else ""))
    outcome = TaskOutcome(task=task, baseline=baseline, nodes=list(previous or []),
                          seeded_from=seed.label if seed else "")
    search = TaskJobs(task, store, backend, device, proposer, outcome, executor, candidate_timeout_s,
                     task_path, reference_path, seed)
    ctx = SearchContext(task=task, iterations=iterations, propose=search.propose, start=search.start,
                        wait_any=search.wait_any, parallel=search.in_flight, inline=proposer.inline,
                        repairs=proposer.repairs, previous=list(outcome.nodes), evaluated=len(outcome.nodes),
                        report_tree=search.write_tree, patience=_patience(bool(seed and seed.winner), deadline),
                        seeded_from=outcome.seeded_from if seed and seed.winner else "", deadline=deadline,
                        share_s=time_share_s or 0.0, confirm_factor=confirm_factor)
    search.ctx = ctx
    for node in outcome.nodes:  # a resumed task whose winner's peer was lost with its run
        search.start_peers(node)

    clock = Stopwatch()
    store.emit(PhaseStarted(phase="candidates", done=len(outcome.nodes), total=iterations, task=task.task_id))
    try:
        strategy.run(ctx)
        outcome.stopped = search_ended(ctx, proposer.name)
        peers_s = search.wait_for_peers()
        # The peer held one of the executor's slots; its seconds are compile_peers' alone, so the
        # breakdown still sums to the wall time (with one slot exact; with several, the others
        # went on with candidates meanwhile, which then read short by at most the peer's time).
        store.emit(PhaseTimed(phase="candidates", seconds=max(0.0, clock.lap() - peers_s), task=task.task_id))
        store.emit(SearchStopped(task=task.task_id, reason=outcome.stopped))
        store.emit(PhaseStarted(phase="finalists", task=task.task_id))
        for node in pick_finalists(outcome.nodes, finalists):
            if node.confirmed is None:  # a resumed task keeps the re-evaluations it finished
                search.confirm(node)
        store.emit(PhaseTimed(phase="finalists", seconds=clock.lap(), task=task.task_id))
        if outcome.best is not None and baseline.peers_wanted:
            search.time_peers()  # a winner only once confirmed: its peer, with nothing else running
        store.db.set_task_state(task.task_id, "done")
    except KeyboardInterrupt:
        stop_workers()  # Ctrl-C: the candidates in flight are lost (a resume redoes them); no wait for them
        raise
    finally:
        # on an error or a kill, the candidates still running are lost (a resume redoes them);
        # their workers are let finish so that none outlives the reference below
        search.close()  # the peer's job too: the reference it reads goes below
        best = outcome.best
        store.emit(TaskEnded(task=task.task_id, candidates=len(outcome.nodes), counts=outcome.status_counts(),
                             best_node=best.node_id if best else None,
                             best_speedup_vs_eager=best.final.speedup_vs_eager if best else None))
        # The oracle outputs are large (float64, several input sets) and can be
        # recomputed from the saved samples; the run folder keeps what it must.
        discard_reference(reference_path)
    return outcome


# How many jobs a proposer that thinks on its own threads may have in flight per worker: one
# thinking while another is evaluated, so that no worker waits on an LLM's reply.
THINKING_PER_WORKER = 2
RECENT = 6  # finished attempts a proposer sees besides the lineage and the best


class TaskJobs:
    """One task's jobs: asking the proposer (inline, or on a job's thread), evaluating in a
    worker, and recording each node on the strategy's thread as soon as it is done, so that a
    kill loses only the candidates still running."""

    def __init__(self, task: KernelTask, store: RunStore, backend: Backend, device: str, proposer: Proposer,
                 outcome: TaskOutcome, executor: Executor, timeout_s: float, task_path: Path,
                 reference_path: Path, seed: Seed | None = None) -> None:
        self.task, self.store, self.backend, self.device, self.proposer = task, store, backend, device, proposer
        self.seed = seed
        self.outcome, self.executor, self.timeout_s = outcome, executor, timeout_s
        self.task_path, self.reference_path = task_path, reference_path
        self.tried: list[Proposal] = [n.proposal for n in outcome.nodes]
        self.failures: list[Failure] = [Failure(n.proposal, n.result.status, n.result.reason)
                                        for n in outcome.nodes if not n.result.ok]
        # After the ids of the recorded nodes: with several in flight when a run was killed, a lost
        # one can leave a gap (n0002 lost, n0003 recorded), which a new node must not fill.
        self.next_id = 1 + max((int(n.node_id[1:]) for n in outcome.nodes), default=-1)
        self.next_failed = len(list((store.task_dir(task.task_id) / "proposals").glob("p*.json")))
        capacity = max(1, executor.capacity)
        self.in_flight = capacity if proposer.inline else capacity * THINKING_PER_WORKER
        self.workers = threading.Semaphore(capacity)  # evaluations at once: the executor's slots
        self.thinking = threading.Semaphore(max(1, proposer.concurrency))
        self.lock = threading.Lock()  # node ids, `tried`, the files a job writes
        self.cooldown_until = 0.0  # a retry's Retry-After, for every job of this task
        self.pool = ThreadPoolExecutor(max_workers=self.in_flight)
        self.running: dict[Future, Callable[[Node], bool]] = {}
        self.facts = self.facts_now()
        self.peers: threading.Thread | None = None  # the compile peer's job, once started
        self.peers_s = 0.0  # its worker's seconds
        self.ctx: SearchContext | None = None
        self.in_flight_nodes: dict[str, tuple[str | None, float]] = {}  # node -> (parent, started)
        self.tree_stats: dict[str, Any] = {}

    def write_tree(self, stats: dict[str, Any] | None = None) -> None:
        """tasks/<task>/tree.json: the strategy's last word on its tree and the nodes in flight,
        so that a dashboard shows visits and values without holding the search's memory."""
        with self.lock:
            if stats is not None:
                self.tree_stats = stats
            in_flight = [{"node": n, "parent": p, "started": t} for n, (p, t) in sorted(self.in_flight_nodes.items())]
            self.store.write_json(f"tasks/{self.task.task_id}/tree.json", {
                **self.tree_stats, "updated": time.time(), "in_flight": in_flight,
                "thinking": 0 if self.proposer.inline else max(0, len(self.running) - len(in_flight))})

    # ------------------------------------------------------------ proposing

    def context(self, parent: Node | None) -> ProposalContext:
        nodes = list(self.outcome.nodes)
        by_id = {n.node_id: n for n in nodes}
        lineage = []
        cursor = parent
        while cursor is not None:
            lineage.insert(0, self.attempt(cursor))
            cursor = by_id.get(cursor.parent_id) if cursor.parent_id else None
        correct = [n for n in nodes if n.result.ok]
        best = max(correct, key=lambda n: n.result.speedup_vs_eager or 0.0) if correct else None
        advice = next((a.proposal.advice for a in reversed(lineage) if a.proposal.advice), {})
        return ProposalContext(
            task=self.task, backend=self.backend.name, facts=self.facts,
            hardware=self.outcome.baseline.hardware if self.outcome.baseline else {},
            parent=lineage[-1] if lineage else None, lineage=lineage,
            best=self.attempt(best) if best else None,
            recent=[self.attempt(n) for n in nodes[-RECENT:]], tried=list(self.tried),
            failures=list(self.failures), advice=advice,
            candidates_left=self.ctx.budget_left() if self.ctx else 0,
            repair_depth=parent.repair_depth if parent else 0, seed=self.seed)

    def attempt(self, node: Node) -> Attempt:
        return Attempt(node_id=node.node_id, parent_id=node.parent_id, proposal=node.proposal, result=node.final,
                       files=self.store.root / "tasks" / self.task.task_id / "nodes" / node.node_id)

    def propose(self, parent: Node | None) -> Proposal | NoProposal:
        """Ask the proposer; whatever it does (raises, returns junk) is a NoProposal, not a crash."""
        wait = self.cooldown_until - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        with self.lock:
            ctx = self.context(parent)
        try:
            with self.thinking:
                proposal = self.proposer.propose(ctx)
        except Exception as e:  # noqa: BLE001 - a proposer's bug must not end a night's search
            if strict():
                raise
            proposal = NoProposal(f"the {self.proposer.name} proposer failed: {type(e).__name__}: {e}"[:300], "retry")
        if not isinstance(proposal, (Proposal, NoProposal)):
            proposal = NoProposal(f"the {self.proposer.name} proposer returned {type(proposal).__name__}", "retry")
        if isinstance(proposal, NoProposal) and proposal.retry_after_s > 0:
            self.cooldown_until = max(self.cooldown_until, time.monotonic() + proposal.retry_after_s)
        if isinstance(proposal, Proposal):
            with self.lock:
                self.tried.append(proposal)
        return proposal

    # ------------------------------------------------------------ jobs

    def start(self, parent: Node | None, decide: Callable[[Node], bool], proposal: Proposal | None) -> Future:
        future = self.pool.submit(self.job, parent, proposal)
        self.running[future] = decide
        return future

    def job(self, parent: Node | None, proposal: Proposal | None) -> Node | NoProposal:
        if proposal is None:
            proposal = self.propose(parent)
            if isinstance(proposal, NoProposal):
                return proposal
        node_id, source = self.begin(proposal, parent)
        with self.workers:
            result = evaluate_candidate(self.task_path, self.reference_path, source, self.backend.name, self.device,
                                        source.parent, self.timeout_s, self.executor)
        return Node(node_id=node_id, parent_id=parent.node_id if parent else None, proposal=proposal, result=result)

    def begin(self, proposal: Proposal, parent: Node | None) -> tuple[str, Path]:
        """A node's id and its files, written before it is evaluated: the source as proposed,
        where it came from, and what the agents said to make it."""
        with self.lock:
            node_id = f"n{self.next_id:04d}"
            self.next_id += 1
        store, task_id = self.store, self.task.task_id
        node_dir = store.node_dir(task_id, node_id)
        source = node_dir / f"candidate{self.backend.source_suffix}"
        source.write_text(proposal.source)
        store.write_json(f"tasks/{task_id}/nodes/{node_id}/proposal.json",
                         {"parent": parent.node_id if parent else None, **proposal.record()})
        if proposal.transcript:
            store.write_json(f"tasks/{task_id}/nodes/{node_id}/transcript.json", proposal.transcript)
        with self.lock:
            self.in_flight_nodes[node_id] = (parent.node_id if parent else None, time.time())
        self.write_tree()
        store.emit(NodeStarted(task=task_id, node=node_id, parent=parent.node_id if parent else None,
                               origin=proposal.origin, model=proposal.model, usage=asdict(proposal.usage)))
        return node_id, source

    def wait_any(self) -> tuple[Future, Node | NoProposal]:
        done, _ = wait(self.running, return_when=FIRST_COMPLETED)
        # several at once: nodes in id order, then the proposals that did not come
        future = min(done, key=lambda f: (not isinstance(f.result(), Node), getattr(f.result(), "node_id", "")))
        decide = self.running.pop(future)
        outcome = future.result()
        if isinstance(outcome, NoProposal):
            self.no_proposal(outcome)
        else:
            self.finish(outcome, decide)
        return future, outcome

    def no_proposal(self, outcome: NoProposal) -> None:
        """Kept like a node's files, so that a reader sees what an agent said when no candidate came."""
        entry = {"policy": outcome.kind, "reason": outcome.reason, "usage": asdict(outcome.usage)}
        if outcome.transcript:
            name = f"p{self.next_failed:04d}"
            self.next_failed += 1
            self.store.write_json(f"tasks/{self.task.task_id}/proposals/{name}.json",
                                  {**entry, "transcript": outcome.transcript})
            entry["file"] = f"tasks/{self.task.task_id}/proposals/{name}.json"
        self.store.emit(ProposalFailed(task=self.task.task_id, **entry))

    def finish(self, node: Node, decide: Callable[[Node], bool]) -> None:
        store, task, outcome = self.store, self.task, self.outcome
        node.repair_depth = repair_depth(node, outcome.nodes)
        node.kept = decide(node)
        outcome.nodes.append(node)
        self.start_peers(node)
        result = node.result
        if not result.ok:
            self.failures.append(Failure(node.proposal, result.status, result.reason))
        store.write_json(f"tasks/{task.task_id}/nodes/{node.node_id}/result.json",
                         {**result.to_json(), "kept": node.kept})
        store.record_node(task.task_id, node.node_id, node.parent_id, node.proposal, result, node.kept,
                          self.backend.source_suffix)
        store.append_result(row_of(task, node))
        with self.lock:
            self.in_flight_nodes.pop(node.node_id, None)
        self.write_tree()
        best = outcome.best
        store.emit(NodeFinished(task=task.task_id, node=node.node_id, parent=node.parent_id, status=result.status,
                                reason=result.reason[:300], kept=node.kept, speedup_vs_eager=result.speedup_vs_eager,
                                faster_than_eager=result.faster_than_eager,
                                p50_ms=result.timing.p50_ms if result.timing else None,
                                rationale=node.proposal.rationale, origin=node.proposal.origin,
                                candidates=len(outcome.nodes),
                                best_speedup_vs_eager=best.final.speedup_vs_eager if best else None,
                                counts=outcome.status_counts()))
        if node.kept:
            store.commit_kept(task.task_id, node.proposal.source, self.backend.source_suffix, _commit_message(node))

    def confirm(self, node: Node) -> None:
        """A finalist evaluated again, with nothing else running: the result that counts."""
        store, task_id = self.store, self.task.task_id
        node_dir = store.node_dir(task_id, node.node_id)
        out_dir = node_dir / "confirm"
        out_dir.mkdir(parents=True, exist_ok=True)
        node.confirmed = evaluate_candidate(self.task_path, self.reference_path,
                                            node_dir / f"candidate{self.backend.source_suffix}", self.backend.name,
                                            self.device, out_dir, self.timeout_s, self.executor)
        store.write_json(f"tasks/{task_id}/nodes/{node.node_id}/confirm.json", node.confirmed.to_json())
        best = self.outcome.best
        store.emit(Confirmed(task=task_id, node=node.node_id, status=node.confirmed.status,
                             reason=node.confirmed.reason[:300], speedup_vs_eager=node.confirmed.speedup_vs_eager,
                             search_speedup_vs_eager=node.result.speedup_vs_eager,
                             best_speedup_vs_eager=best.final.speedup_vs_eager if best else None))

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.wait_for_peers()

    # ------------------------------------------------------------ the compile peer

    def facts_now(self) -> TaskFacts:
        """The task's facts for a proposer, with the compile peer as far as it is timed."""
        b = self.outcome.baseline
        return task_facts(self.task, b.eager.p50_ms if b.eager else None, b.compiled_p50_ms,
                          b.peer_state(task_done=False) if b.peers_wanted else "")

    def start_peers(self, node: Node) -> None:
        """The compile peer, on a thread of its own, at the first candidate that beats eager: only
        then can it decide something (whether the winner beats torch.compile too, what the report
        says), and from then on the analyst's prompt has it to aim at. Not at the finalists'
        confirmation alone: that is the search's end, when no proposal can use it any more."""
        won = node.result.ok and node.result.faster_than_eager
        if won and self.peers is None and self.outcome.baseline.peers_wanted:
            self.peers = threading.Thread(target=self.time_peers, name=f"peers-{self.task.task_id}", daemon=True)
            self.peers.start()

    def time_peers(self) -> None:
        """Time the peer in its own worker job, holding one of the executor's slots as a candidate
        does, and record it: baseline.json (a resume keeps it), a compile_peers phase, the facts."""
        store, task_id, baseline = self.store, self.task.task_id, self.outcome.baseline
        modes = tuple(baseline.compile_modes)
        with self.workers:
            try:
                compiled, seconds = evaluate_peers(self.task_path, self.reference_path, self.device,
                                                   store.task_dir(task_id) / "peers", PEERS_TIMEOUT_S, modes,
                                                   self.executor)
            except Exception as e:  # noqa: BLE001 - a peer is a column of the report, never the search's end
                compiled, seconds = {m: {"timing": None, "error": f"{type(e).__name__}: {e}"[:300]} for m in modes}, 0.0
        with self.lock:
            baseline.compiled = compiled
            self.facts = self.facts_now()
            self.peers_s += seconds
            store.write_json(f"tasks/{task_id}/baseline.json", baseline.to_json())
        store.emit(PhaseTimed(phase="compile_peers", seconds=seconds, task=task_id))

    def wait_for_peers(self) -> float:
        """Wait for the peer's job, if one runs; the seconds it has taken so far."""
        if self.peers is not None:
            self.peers.join()
        return self.peers_s


def timed_peers(earlier: Baseline | None, modes: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """A resumed task's compile peers, where an earlier session timed every mode this run asks for:
    they are not timed twice. One that failed is tried again, once a candidate beats eager."""
    compiled = earlier.compiled if earlier is not None else {}
    timed = bool(modes) and set(compiled) == set(modes) and all(e.get("timing") for e in compiled.values())
    return dict(compiled) if timed else {}


def pick_finalists(nodes: list[Node], count: int) -> list[Node]:
    """The `count` correct, timed candidates with the best speedups over their own eager."""
    timed = [n for n in nodes if n.result.ok and n.result.speedup_vs_eager is not None]
    return sorted(timed, key=lambda n: n.result.speedup_vs_eager, reverse=True)[:count]


def _commit_message(node: Node) -> str:
    r = node.result
    speed = f"{r.speedup_vs_eager:.3f}x vs eager" if r.speedup_vs_eager else f"correct, not timed{': ' if r.noisy else ''}{r.noisy}"
    timing = f" (p50 {r.timing.p50_ms:.4f} ms, eager {r.eager.p50_ms:.4f} ms)" if r.timing and r.eager else ""
    return f"{node.node_id}: {speed}{timing}\n\n{node.proposal.rationale}\n"
