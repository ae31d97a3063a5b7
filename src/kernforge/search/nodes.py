"""A task's search records (records.nodes: Node, TaskOutcome) read back from the run folder where a
run stopped, and the rows made of them: results.tsv's (row_of) and the result table's (task_row)."""

from __future__ import annotations

import json
from collections import Counter

from kernforge.records import ResultRow
from kernforge.records.evaluation import EvalResult
from kernforge.records.nodes import Node, TaskOutcome
from kernforge.records.proposal import Proposal
from kernforge.records.summary import VERDICT_OPENINGS, Finalist, TaskRow, TaskStatus
from kernforge.records.task import KernelTask
from kernforge.store import RunStore

BUDGET_SPENT = "budget spent"  # how search_ended's reason starts when the search ran its course


def repair_depth(node: Node, earlier: list[Node]) -> int:
    """Failed candidates in a row ending at `node` (0 when it is correct), from its parent's."""
    if node.result.ok:
        return 0
    parent = next((n for n in earlier if n.node_id == node.parent_id), None)
    return 1 + (parent.repair_depth if parent else 0)


def previous_nodes(store: RunStore, task_id: str) -> list[Node]:
    """The nodes a task recorded before the run stopped, rebuilt from the database and the files,
    in the order they finished: with several in flight, the strategies decided in that order (a
    later id can have been kept before an earlier one beat it), so a rebuilt tree or greedy's
    last kept node must see them so too."""
    nodes = []
    for rec in sorted(store.db.nodes(task_id), key=lambda r: r.finished):
        path = store.root / rec.source_path
        source = path.read_text() if path.exists() else ""
        proposal = Proposal.from_record(source, {**rec.params, "rationale": rec.rationale})
        confirm = store.root / "tasks" / task_id / "nodes" / rec.node / "confirm.json"
        confirmed = EvalResult.from_json(json.loads(confirm.read_text())) if confirm.is_file() else None
        node = Node(node_id=rec.node, parent_id=rec.parent, proposal=proposal,
                    result=EvalResult.from_json(rec.result), kept=rec.kept, confirmed=confirmed)
        node.repair_depth = repair_depth(node, nodes)
        nodes.append(node)
    return nodes


def row_of(task: KernelTask, node: Node) -> ResultRow:
    """The node's line of results.tsv."""
    r = node.result
    return ResultRow(
        task=task.task_id, node=node.node_id, parent=node.parent_id or "",
        status=r.status, failure_reason=r.reason or r.noisy,  # noisy: correct, its timing spoilt
        p50_ms=r.timing.p50_ms if r.timing else None,
        p20_ms=r.timing.p20_ms if r.timing else None,
        p80_ms=r.timing.p80_ms if r.timing else None,
        eager_p50_ms=r.eager.p50_ms if r.eager else None,
        speedup_vs_eager=r.speedup_vs_eager, faster_than_eager=r.faster_than_eager,
        kept=node.kept, eval_s=r.wall_s, rationale=node.proposal.rationale,
        origin=node.proposal.origin, model=node.proposal.model,
        llm_tokens=node.proposal.usage.tokens, llm_cost_usd=node.proposal.usage.cost_usd)


def task_row(outcome: TaskOutcome) -> TaskRow:
    """One line of the result table: the best speedup is 1.0 unless a kernel beat eager beyond noise."""
    task, best = outcome.task, outcome.best
    eager = best.final.eager if best else (outcome.baseline.eager if outcome.baseline else None)
    compiled = outcome.baseline.compiled_p50_ms if outcome.baseline else None
    timed = any(n.result.timed for n in outcome.nodes)
    status = _status(outcome, best, timed)
    return TaskRow(
        task=task.task_id, op=task.op, shape=task.shape_text, dtype=task.dtype_text, share=task.share,
        eager_p50_ms=eager.p50_ms if eager else None,
        best_p50_ms=best.final.timing.p50_ms if best else None,
        best_speedup_vs_eager=best.final.speedup_vs_eager if best else (1.0 if timed else None),
        best_node=best.node_id if best else None,
        compile_p50_ms=compiled,
        best_speedup_vs_compile=(compiled / best.final.timing.p50_ms) if best and compiled else None,
        compile_peer=(outcome.baseline.peer_state(task_done=bool(outcome.stopped or outcome.error))
                      if outcome.baseline else ""),
        finalists={n.node_id: Finalist(search_speedup_vs_eager=n.result.speedup_vs_eager, status=n.confirmed.status,
                                       speedup_vs_eager=n.confirmed.speedup_vs_eager)
                   for n in outcome.nodes if n.confirmed is not None},
        status=status, verdict=_verdict(outcome, status),
        real_inputs=task.real_inputs,  # all | partial | none (over the sample cap: drawn)
        candidates=len(outcome.nodes), correct=len(outcome.correct), status_counts=outcome.status_counts(),
        error=outcome.error, stopped=outcome.stopped, seeded_from=outcome.seeded_from)


def _status(outcome: TaskOutcome, best: Node | None, timed: bool) -> TaskStatus:
    if outcome.error:
        return "not searched"
    if best is not None:
        return "faster"
    if not outcome.correct:
        return "no correct"
    return "no faster" if timed else "not timed"


def _verdict(outcome: TaskOutcome, status: TaskStatus) -> str:
    """What came of the task; one searched on drawn inputs (real ones over the sample cap) says so."""
    if status == "not searched":
        return f"{VERDICT_OPENINGS[status]}: {outcome.error}"
    verdict = VERDICT_OPENINGS[status] + (_commonest_failure(outcome) if status == "no correct" else "")
    early = outcome.stopped and not outcome.stopped.startswith(BUDGET_SPENT)  # a spent budget is the row's `stopped`
    notes = [n for n in (outcome.task.inputs_note, f"stopped early: {outcome.stopped}" if early else "") if n]
    return "; ".join([verdict, *notes])


def _commonest_failure(outcome: TaskOutcome) -> str:
    """Why nothing worked, when one reason dominates: one template tripping a scan rule or a
    compiler difference fails every candidate the same way, and a user should see it first."""
    failed = [n.result for n in outcome.nodes if not n.result.ok]
    if not failed:
        return ""
    reasons = Counter((r.status, (r.reason.splitlines() or [""])[0][:160]) for r in failed)
    (status, reason), count = reasons.most_common(1)[0]
    return f" ({count} of {len(outcome.nodes)} {status}" + (f": {reason})" if reason else ")")
