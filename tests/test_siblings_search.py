"""Sibling tasks searched for real on the cpu backend: a model with two softmaxes of different
shapes, whose second task starts from the first's best point, says so in its events, its row and
`show`, and does again when a killed run is resumed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import TESTS_DIR

from kernforge.optimize import OptimizeOptions, optimize, resume
from kernforge.report import candidate_lines
from kernforge.store.events import TaskStarted
from kernforge.search.runs import read_run

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("siblings")]  # one worker: the run made once

TWO_SOFTMAX = TESTS_DIR / "models" / "tiny_two_softmax.py"


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    runs = tmp_path_factory.mktemp("sibling-runs")
    return optimize(OptimizeOptions(spec=str(TWO_SOFTMAX), backend="cpu", iterations=3, ops=["_softmax"], top_k=2,
                                    runs_dir=runs, fuse=False, apply=False, finalists=1))


def siblings_best(outcome):
    """The first task's best point as a seed takes it: its winner, else its fastest correct candidate."""
    correct = [n for n in outcome.nodes if n.final.ok]
    return outcome.best or max(correct, key=lambda n: n.final.speedup_vs_eager or 0.0)


def task_starts(run_dir: Path) -> dict[str, str]:
    events = read_run(run_dir).store.events()
    return {e.task: e.seeded_from for e in events if isinstance(e, TaskStarted)}  # the last start of each


def test_the_second_signature_starts_from_the_firsts_best_point(searched):
    first, second = searched.outcomes
    assert first.task.op == second.task.op and first.task.shape_text != second.task.shape_text
    best = siblings_best(first)
    label = f"{first.task.task_id}/{best.node_id}"
    assert first.seeded_from == "" and second.seeded_from == label
    start = second.nodes[0]
    assert start.node_id == "n0000" and start.parent_id is None
    assert start.proposal.params == best.proposal.params
    assert start.proposal.rationale.startswith(f"seeded from {label}, the best of a sibling of shape "
                                               f"{first.task.shape_text}")
    assert start.result.ok, start.result.reason  # a working kernel in one iteration


def test_the_seed_is_in_the_events_the_summary_and_show(searched):
    first, second = searched.outcomes
    assert task_starts(searched.run_dir) == {first.task.task_id: "", second.task.task_id: second.seeded_from}
    rows = {r["task"]: r for r in read_run(searched.run_dir).store.read_json("summary.json")["tasks"]}
    assert rows[second.task.task_id]["seeded_from"] == second.seeded_from
    assert rows[first.task.task_id]["seeded_from"] == ""
    lines = candidate_lines(read_run(searched.run_dir))
    assert any(line.startswith(f"{second.task.task_id}: ") and line.endswith(f", seeded from {second.seeded_from}")
               for line in lines), lines


def test_a_resumed_run_seeds_from_its_folder(searched, tmp_path):
    """A run killed before the second task's first candidate finished: on resume (a new proposer,
    nothing in memory) the task finds its seed in the first task's recorded nodes."""
    first, second = searched.outcomes
    run_dir = shutil.copytree(searched.run_dir, tmp_path / "run")
    store = read_run(run_dir).store
    with store.db.conn:
        store.db.conn.execute("DELETE FROM nodes WHERE task = ?", (second.task.task_id,))
    store.db.set_task_state(second.task.task_id, "running")
    shutil.rmtree(run_dir / "tasks" / second.task.task_id / "nodes")
    (run_dir / "tasks" / second.task.task_id / "seed.json").unlink()
    (run_dir / "summary.json").unlink()
    result = resume(run_dir)
    again = result.outcomes[-1]
    assert again.task.task_id == second.task.task_id and again.seeded_from == second.seeded_from
    assert again.nodes[0].proposal.params == second.nodes[0].proposal.params
    assert task_starts(run_dir)[second.task.task_id] == second.seeded_from
