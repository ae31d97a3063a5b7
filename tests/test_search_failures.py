"""A search survives candidates that crash, hang or exhaust memory, and marks each.

A scripted proposer hands the real search (search_task, greedy, worker processes)
four candidates in turn: a segfault, an endless loop, an unbounded allocation and
an honest kernel. The search must finish, record every one in results.tsv with its
failure kind, and keep the honest one.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from helpers import c_softmax_source

from kernforge.backends import get_backend
from kernforge.records.proposal import NoProposal, Proposal
from kernforge.search import get_strategy, search_task
from kernforge.store import RunStore

pytestmark = pytest.mark.integration

SEGFAULT = """\
    volatile float *nowhere = 0;
    *nowhere = 1.0f;
"""
ENDLESS = """\
    volatile int spin = 1;
    while (spin) { }
"""
UNBOUNDED = """\
    for (;;) {  /* 64 MB more each turn, never freed */
        volatile char *block = (volatile char *)malloc(1 << 26);
        if (!block) return 7;  /* the worker's memory cap reached: this candidate's failure */
        block[0] = 1;
    }
"""


class Scripted:
    """Proposes the given sources in order, then nothing."""

    name = "scripted"
    inline, concurrency, repairs = True, 1, 0

    def __init__(self, sources: list[tuple[str, str]]):
        self.sources = list(sources)

    def why_unsupported(self, task, backend):
        return None

    def check(self):
        pass

    def budget_exhausted(self):
        return None

    def propose(self, ctx):
        if not self.sources:
            return NoProposal("scripted: nothing left", "exhausted")
        rationale, source = self.sources.pop(0)
        return Proposal(source=source, rationale=rationale, params={"n": len(ctx.tried)})


def test_search_finishes_and_marks_crash_hang_and_memory_exhaustion(softmax_capture, tmp_path: Path):
    _, _, task = softmax_capture
    store = RunStore.create(tmp_path / "runs", "failures")
    with_stdlib = "#include <stdlib.h>\n"
    proposer = Scripted([
        ("segfault", c_softmax_source(SEGFAULT)),
        ("endless loop", c_softmax_source(ENDLESS)),
        ("unbounded allocation", with_stdlib + c_softmax_source(UNBOUNDED)),
        ("honest", c_softmax_source()),
    ])
    started = time.perf_counter()
    outcome = search_task(task, store, get_backend("cpu"), "cpu", proposer, get_strategy("greedy"),
                          iterations=4, candidate_timeout_s=8.0)
    assert time.perf_counter() - started < 120
    statuses = [n.result.status for n in outcome.nodes]
    assert statuses[:2] == ["crash", "timeout"]
    assert "SIGSEGV" in outcome.nodes[0].result.reason
    # under the worker's memory cap malloc returns NULL and the kernel reports it as an error code
    assert statuses[2] in ("runtime_error", "out_of_memory", "crash")
    assert statuses[3] == "ok" and outcome.nodes[3].kept
    rows = store.results()
    assert [r.status for r in rows] == statuses
    assert all(r.failure_reason for r in rows[:3])


def test_a_search_leaves_events_and_a_commit_per_kept_improvement(softmax_capture, tmp_path: Path):
    import subprocess

    _, _, task = softmax_capture
    store = RunStore.create(tmp_path / "runs", "history")
    proposer = Scripted([("broken", c_softmax_source(SEGFAULT)), ("honest", c_softmax_source())])
    outcome = search_task(task, store, get_backend("cpu"), "cpu", proposer, get_strategy("greedy"),
                          iterations=2, candidate_timeout_s=30.0)
    events = store.events()
    # why the search ended (the budget), then the one correct candidate is a finalist: evaluated
    # again, alone, after the budget is spent
    assert [e.kind for e in events if e.kind not in ("phase", "phase_start")] == [
        "task_start", "node_start", "node", "node_start", "node", "search_stopped", "confirm", "task_end"]
    # the phases under way, as a status line shows them: the search counts its candidates
    assert [(e.phase, e.done, e.total) for e in events if e.kind == "phase_start"] == [
        ("candidates", 0, 2), ("finalists", None, None)]
    # the task's time by phase: the baseline worker's parts, the candidates, the finalists
    phases = {e.phase for e in events if e.kind == "phase"}
    assert {"baselines", "candidates", "finalists"} <= phases, phases
    assert next(e for e in events if e.kind == "search_stopped").reason.startswith("budget spent")
    assert [e.status for e in events if e.kind == "node"] == ["crash", "ok"]
    confirm = next(e for e in events if e.kind == "confirm")
    assert confirm.node == "n0001" and confirm.status == "ok"
    assert outcome.nodes[1].confirmed is not None and outcome.nodes[0].confirmed is None
    assert (store.task_dir(task.task_id) / "nodes" / "n0001" / "confirm.json").is_file()
    assert events[-1].counts == {"crash": 1, "ok": 1}
    kept = [n for n in outcome.nodes if n.kept]
    assert [n.node_id for n in kept] == ["n0001"]
    history = store.task_dir(task.task_id) / "history"
    log = subprocess.run(["git", "log", "--format=%B"], cwd=history, capture_output=True, text=True,
                         check=True).stdout
    assert log.startswith("n0001: ") and "honest" in log  # the measured result, then the rationale
    assert (history / "kernel.c").read_text() == c_softmax_source()


def test_a_resumed_task_keeps_the_finalists_it_had_evaluated_again(softmax_capture, tmp_path: Path):
    from kernforge.search.nodes import previous_nodes

    _, _, task = softmax_capture
    store = RunStore.create(tmp_path / "runs", "finalists")
    proposer = Scripted([("honest", c_softmax_source()), ("honest again", c_softmax_source())])
    first = search_task(task, store, get_backend("cpu"), "cpu", proposer, get_strategy("greedy"),
                        iterations=2, candidate_timeout_s=30.0)
    assert all(n.confirmed is not None for n in first.nodes)
    # as if killed after the first finalist's second evaluation: only the other is run again
    (store.task_dir(task.task_id) / "nodes" / "n0001" / "confirm.json").unlink()
    previous = previous_nodes(store, task.task_id)
    assert previous[0].confirmed == first.nodes[0].confirmed and previous[1].confirmed is None
    again = search_task(task, store, get_backend("cpu"), "cpu", proposer, get_strategy("greedy"),
                        iterations=2, candidate_timeout_s=30.0, previous=previous)
    confirms = [e.node for e in store.events() if e.kind == "confirm"]
    # the first search's two (fastest first, either order), then the resumed one's only
    assert sorted(confirms[:2]) == ["n0000", "n0001"] and confirms[2:] == ["n0001"]
    assert len(again.nodes) == 2


def test_the_workers_memory_cap_counts_from_what_it_holds_at_its_start():
    import resource
    import subprocess
    import sys

    code = ("import resource; from kernforge.evaluate.worker import limit_memory, _data_bytes; held = _data_bytes(); "
            "limit_memory(1 << 30); print(held, resource.getrlimit(resource.RLIMIT_DATA)[0])")
    held, cap = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                    .stdout.split())
    assert held > 0 and cap >= held + (1 << 30) and cap < held + (1 << 30) + (64 << 20)
    assert resource.getrlimit(resource.RLIMIT_DATA)[0] != cap  # set in the child only
