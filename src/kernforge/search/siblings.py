"""Siblings: tasks of one op that differ only in sizes and strides, and the seed one gives another.

A model runs one op at many shapes (a VAE decoder's group norms: one op, one dtype, a dozen
shapes); searched one after another, each would climb from its family's starting point and
spend its budget finding what a sibling already found. A task whose sibling was searched
earlier in the run starts from that sibling's best candidate instead (ProposalContext.seed).

Seeds come from the run folder, never from memory, so that a resumed run seeds as the first
one did: the siblings' nodes from the database, and the seed a task started from kept in
tasks/<task>/seed.json (a task resumed after its first candidate keeps the seed it had).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernforge.propose.context import Attempt, Seed
from kernforge.records.nodes import TaskOutcome
from kernforge.records.task import KernelTask
from kernforge.search.nodes import previous_nodes
from kernforge.store import RunStore

if TYPE_CHECKING:
    from kernforge.records.nodes import Node

SEED_FILE = "seed.json"


@dataclass(frozen=True)
class SiblingKey:
    """What two tasks share to be siblings: everything but sizes and strides that a kernel is
    specialised on. Scalars are left out: group norm's N, C and HxW are sizes passed as ints."""

    op: str
    dtypes: tuple[str, ...]  # every tensor input's, then every output's
    backend: str


def sibling_key(task: KernelTask, backend: str) -> SiblingKey:
    dtypes = tuple(str(t.get("dtype", "")) for t in (*task.tensor_args, *task.outputs))
    return SiblingKey(op=task.op, dtypes=dtypes, backend=backend)


def are_siblings(a: KernelTask, a_backend: str, b: KernelTask, b_backend: str) -> bool:
    """Two tasks of one op, dtypes and backend at different signatures (a task is not its own)."""
    return a.signature != b.signature and sibling_key(a, a_backend) == sibling_key(b, b_backend)


def find_seed(store: RunStore, task: KernelTask, backend: str) -> Seed | None:
    """The best candidate of any sibling the run folder holds: among siblings' winners (beat eager
    beyond the noise, confirmed), the fastest; where none won, the fastest correct candidate, so
    that a sibling's working point still spares this task the climb to it. None: no sibling has
    a correct candidate."""

    run_backend = _run_backend(store, backend)
    seeds = []
    for task_id, _, data in store.db.tasks():
        sibling = KernelTask(**data)
        if not are_siblings(task, backend, sibling, run_backend):
            continue
        nodes = previous_nodes(store, task_id)
        winner = TaskOutcome(task=sibling, baseline=None, nodes=nodes).best
        correct = [n for n in nodes if n.final.ok]
        best = winner or max(correct, key=lambda n: n.final.speedup_vs_eager or 0.0, default=None)
        if best is not None:
            seeds.append(_seed_of(store, sibling, best, winner is not None))
    return max(seeds, key=lambda s: (s.winner, s.attempt.speedup or 0.0), default=None)


def task_seed(store: RunStore, task: KernelTask, backend: str, resumed: bool) -> Seed | None:
    """The seed a task starts from: the one it started from before a resume (seed.json), else,
    for a task with no candidate yet, a sibling's best, written down as this task's."""
    if _seed_path(store, task.task_id).is_file():
        return _read_seed(store, task.task_id)
    if resumed:
        return None  # it started without one: its first candidates were its family's
    seed = find_seed(store, task, backend)
    if seed is not None:
        store.write_json(f"tasks/{task.task_id}/{SEED_FILE}",
                         {"seeded_from": seed.label, "task": seed.task_id, "node": seed.attempt.node_id,
                          "shape": seed.shape, "winner": seed.winner,
                          "speedup_vs_eager": seed.attempt.speedup, "params": seed.attempt.proposal.params})
    return seed


def seeded_from(store: RunStore, task_id: str) -> str:
    """The sibling's task and node a task started from ("t0-.../n0003"), or "" for none."""
    if not _seed_path(store, task_id).is_file():
        return ""
    return str(store.read_json(f"tasks/{task_id}/{SEED_FILE}").get("seeded_from", ""))


def _seed_path(store: RunStore, task_id: str) -> Path:
    return store.root / "tasks" / task_id / SEED_FILE  # not store.task_dir: a reader makes no folder


def _seed_of(store: RunStore, sibling: KernelTask, node: Node, winner: bool) -> Seed:
    attempt = Attempt(node_id=node.node_id, parent_id=node.parent_id, proposal=node.proposal, result=node.final,
                      files=store.root / "tasks" / sibling.task_id / "nodes" / node.node_id)
    return Seed(task_id=sibling.task_id, shape=sibling.shape_text, attempt=attempt, winner=winner)


def _read_seed(store: RunStore, task_id: str) -> Seed | None:
    """A seed.json read back as the Seed it named, its candidate rebuilt from the sibling's nodes;
    None where the sibling or its node is no longer in the folder."""

    data = store.read_json(f"tasks/{task_id}/{SEED_FILE}")
    sibling = next((KernelTask(**d) for t, _, d in store.db.tasks() if t == data.get("task")), None)
    if sibling is None:
        return None
    node = next((n for n in previous_nodes(store, sibling.task_id) if n.node_id == data.get("node")), None)
    return _seed_of(store, sibling, node, bool(data.get("winner"))) if node is not None else None


def _run_backend(store: RunStore, default: str) -> str:
    """The backend the run's tasks were searched on (config.json); a folder without one (a task
    searched on its own, as in tests) is searched on the caller's."""
    if not (store.root / "config.json").is_file():
        return default
    return str(store.read_json("config.json").get("resolved_backend") or default)
