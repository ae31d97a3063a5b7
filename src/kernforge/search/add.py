"""A hand-written candidate as a node of a finished (or stopped) run's task: `kernforge add`.

It is evaluated as any other (scan, checks on the real and fresh inputs, timing against
eager in the same worker), recorded in the database, results.tsv and events.jsonl with
origin "human", and, when correct and timed, evaluated a second time as a finalist so
that it can be the task's winner; summary.json's row for the task is made again. The
task's baseline is recomputed (the oracle is deleted when a search ends) from the same
samples and seed, so the checks are the search's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernforge.backends import choose_backend
from kernforge.errors import UserError
from kernforge.evaluate import evaluate_baseline
from kernforge.evaluate.executors import LocalExecutor
from kernforge.evaluate.runner import discard_reference
from kernforge.records.config import RunConfig
from kernforge.records.nodes import Node, TaskOutcome
from kernforge.records.proposal import Proposal
from kernforge.records.task import KernelTask
from kernforge.search.engine import BASELINE_TIMEOUT_S, TaskJobs
from kernforge.search.nodes import previous_nodes, task_row
from kernforge.search.runs import read_baseline
from kernforge.search.greedy import keeps
from kernforge.store import RunStore


@dataclass
class Added:
    node: Node
    outcome: TaskOutcome  # the task with the new node, its best made again
    backend: str
    device: str


class _Human:
    """Stands where a proposer would: the node's proposal is made before, by hand."""

    name, inline, concurrency, repairs = "human", True, 1, 0


def add_candidate(run_dir: Path, task_id: str, kernel_file: Path, parent: str | None = None,
                  timeout_s: float = 120.0) -> Added:
    store, task = _open(run_dir, task_id)
    config = RunConfig.from_json(store.read_json("config.json"))
    import torch

    backend = choose_backend(config.backend, torch.cuda.is_available())
    device = config.device
    if not kernel_file.is_file():
        raise UserError(f"kernel file '{kernel_file}' not found")
    if kernel_file.suffix != backend.source_suffix:
        raise UserError(f"this run's {backend.name} backend takes {backend.source_suffix} files, not "
                        f"'{kernel_file.name}'")
    nodes = previous_nodes(store, task_id)
    parent_node = _parent(nodes, parent)
    task_dir = store.task_dir(task_id)
    reference = task_dir / "reference.pt"
    try:
        baseline = evaluate_baseline(task_dir / "task.json", reference, device, task_dir / "add-baseline",
                                     BASELINE_TIMEOUT_S, ())
    except RuntimeError as e:
        raise UserError(f"the task's baseline failed again, so nothing can be judged: {str(e).splitlines()[0]}") from None
    earlier = read_baseline(store, task_id)  # the run's compile peer: kept where timed, else timed if this one wins
    if earlier is not None:
        baseline.compile_modes, baseline.compiled = earlier.compile_modes, earlier.compiled
    outcome = TaskOutcome(task=task, baseline=baseline, nodes=nodes)
    jobs = TaskJobs(task, store, backend, device, _Human(), outcome, LocalExecutor(None, 1, None), timeout_s,
                    task_dir / "task.json", reference)
    try:
        proposal = Proposal(source=kernel_file.read_text(), rationale=f"hand-written: {kernel_file.name}",
                            origin="human", params={"file": kernel_file.name})
        kept = [n for n in nodes if n.kept]
        node = jobs.job(parent_node, proposal)
        jobs.finish(node, lambda n: keeps(n, kept[-1] if kept else None))
        if node.result.ok and node.result.speedup_vs_eager is not None:
            jobs.confirm(node)
    finally:
        jobs.close()
        discard_reference(reference)
    _rewrite_summary(store, outcome)
    return Added(node=node, outcome=outcome, backend=backend.name, device=device)


def _open(run_dir: Path, task_id: str) -> tuple[RunStore, KernelTask]:
    if not (run_dir / "config.json").is_file() or not (run_dir / "run.db").is_file():
        raise UserError(f"'{run_dir}' is not a kernforge run folder with a database (config.json, run.db)")
    store = RunStore(run_dir)
    tasks = {tid: data for tid, _, data in store.db.tasks()}
    if task_id not in tasks:
        raise UserError(f"the run has no task '{task_id}'; its tasks: {', '.join(tasks) or 'none'}")
    return store, KernelTask(**tasks[task_id])


def _parent(nodes: list[Node], parent: str | None) -> Node | None:
    if parent is None:
        return None
    found = next((n for n in nodes if n.node_id == parent), None)
    if found is None:
        raise UserError(f"the task has no node '{parent}'; its nodes: {', '.join(n.node_id for n in nodes) or 'none'}")
    return found


def _rewrite_summary(store: RunStore, outcome: TaskOutcome) -> None:
    """summary.json's row for the task made again with the new node (when the run has a summary)."""

    written = store.summary()
    if written is None:
        return
    row = task_row(outcome)
    written.tasks = [row if t.task == row.task else t for t in written.tasks]
    store.write_summary(written)
