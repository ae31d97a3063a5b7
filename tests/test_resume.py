"""Resuming a run: kill -9 in the middle of a search, then `optimize --resume` finishes it.

The search is a real process, killed with its workers (start_and_kill); each resume runs in this
process (helpers.run_cli) on a copy of the killed run's folder, so that one kill serves two tests."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO_ROOT, SOFTMAX_OP, TINY_MODEL, copy_run_folder, run_cli

from kernforge.backends import cpu
from kernforge.store.db import RunDB

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("resume"),  # one worker: one kill for the module
              pytest.mark.skipif(cpu.unavailable_reason() is not None, reason="gcc is not installed")]

ITERATIONS = 6


def recorded_nodes(runs_dir: Path) -> int:
    dbs = list(runs_dir.glob("*/run.db"))
    if not dbs:
        return 0
    # closed here, not when the garbage collector gets to it: an error's traceback keeps the
    # connection in a cycle, and its close, once the search is killed, is the last one, which
    # checkpoints the WAL and deletes it, in the middle of a copy of the folder
    conn = None
    try:
        conn = sqlite3.connect(dbs[0], timeout=1.0)
        return conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0]
    except sqlite3.Error:
        return 0  # not created yet
    finally:
        if conn is not None:
            conn.close()


def start_and_kill(runs_dir: Path, after_nodes: int, parallel: int = 1) -> Path:
    """Start a search and kill -9 its whole process group once `after_nodes` nodes are recorded.
    One finalist (the default is 3): its resume still times a finalist again, two worker runs fewer."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernforge", "optimize", str(TINY_MODEL), "--backend", "cpu", "--finalists", "1",
         "--iterations", str(ITERATIONS), "--parallel", str(parallel), "--runs-dir", str(runs_dir), "--json"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 240
    try:
        while recorded_nodes(runs_dir) < after_nodes:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the search recorded too few nodes in time"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the search and any worker in flight, mid-write or not
        proc.wait()
    (run_dir,) = runs_dir.iterdir()
    return run_dir


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    """A search killed once 3 nodes were recorded; read-only: each test resumes a copy (killed_copy)."""
    return start_and_kill(tmp_path_factory.mktemp("runs"), after_nodes=3)


def killed_copy(killed: Path, folder: Path) -> Path:
    """The killed run's folder copied (a moved folder: its sources are found from it; its task's
    samples, kept by absolute path, are still read from the original's capture)."""
    return copy_run_folder(killed, folder)


@pytest.fixture(scope="module")
def resumed(killed, tmp_path_factory):
    run_dir = killed_copy(killed, tmp_path_factory.mktemp("resumed"))
    before = RunDB(run_dir / "run.db").nodes()
    proc = run_cli("optimize", "--resume", str(run_dir), "--json")
    return run_dir, before, proc


def test_a_killed_run_resumes_and_spends_exactly_its_budget(resumed):
    run_dir, before, proc = resumed
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 2 <= len(before) < ITERATIONS
    data = json.loads(proc.stdout)
    (task,) = [t for t in data["tasks"] if t["op"] == SOFTMAX_OP]
    assert task["candidates"] == ITERATIONS
    nodes = RunDB(run_dir / "run.db").nodes()
    assert [n.node for n in nodes] == [f"n{i:04d}" for i in range(ITERATIONS)]
    # the nodes recorded before the kill are kept as they were
    assert [(n.node, n.status, n.result) for n in nodes[:len(before)]] == \
        [(n.node, n.status, n.result) for n in before]


def test_resumed_candidates_expand_the_recorded_tree_and_never_repeat(resumed):
    run_dir, _, _ = resumed
    nodes = RunDB(run_dir / "run.db").nodes()
    # recorded relative to the run folder, so that a moved folder, or a resume started from
    # another directory, still finds every candidate's source
    assert not any(Path(n.source_path).is_absolute() for n in nodes)
    sources = [(run_dir / n.source_path).read_text() for n in nodes]
    assert len(set(sources)) == len(sources)
    ids = {n.node for n in nodes}
    assert all(n.parent is None or n.parent in ids for n in nodes)


def test_resumed_run_folder_is_whole(resumed):
    run_dir, _, _ = resumed
    with open(run_dir / "results.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert sorted(r["node"] for r in rows) == [f"n{i:04d}" for i in range(ITERATIONS)]
    kinds = [json.loads(line)["kind"] for line in (run_dir / "events.jsonl").read_text().splitlines()]
    # the search's last event ends its task; apply (on by default) runs after it, then the run ends
    searched = [k for k in kinds if k not in ("apply_progress", "phase", "phase_start")]
    assert "resumed" in kinds and searched[-3:] == ["task_end", "applied", "run_end"]
    (state,) = {state for _, state, _ in RunDB(run_dir / "run.db").tasks()}
    assert state == "done"
    assert json.loads((run_dir / "summary.json").read_text())["tasks"][0]["candidates"] == ITERATIONS


def test_resuming_a_finished_run_searches_nothing_more(resumed):
    run_dir, _, _ = resumed
    proc = run_cli("optimize", "--resume", str(run_dir), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["tasks"][0]["candidates"] == ITERATIONS


def test_new_nodes_never_take_the_id_of_a_recorded_one(killed, tmp_path):
    """A gap left by a candidate lost in flight (n0001 here) is not filled: n0002 is kept as it was."""
    from kernforge.search.nodes import previous_nodes
    from kernforge.store import RunStore

    run_dir = killed_copy(killed, tmp_path)
    store = RunStore(run_dir)
    recorded = previous_nodes(store, store.db.tasks()[0][0])
    kept = recorded[2]
    with store.db.conn:
        store.db.conn.execute("DELETE FROM nodes WHERE node = ?", (recorded[1].node_id,))
    proc = run_cli("optimize", "--resume", str(run_dir), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    nodes = {n.node: n for n in RunDB(run_dir / "run.db").nodes()}
    assert recorded[1].node_id not in nodes and len(nodes) == ITERATIONS
    assert nodes[kept.node_id].result == kept.result.to_json()
    assert len(RunDB(run_dir / "run.db").nodes()) == ITERATIONS


def test_resume_of_a_folder_that_is_no_run_is_one_clear_error(tmp_path):
    proc = run_cli("optimize", "--resume", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error:") and "not a kernforge run folder" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_spec_and_resume_together_are_refused(tmp_path):
    proc = run_cli("optimize", str(TINY_MODEL), "--resume", str(tmp_path))
    assert proc.returncode == 2 and "not both" in proc.stderr


def test_a_run_killed_with_candidates_in_flight_resumes_to_its_budget(tmp_path):
    run_dir = start_and_kill(tmp_path, after_nodes=3, parallel=2)
    before = RunDB(run_dir / "run.db").nodes()
    proc = run_cli("optimize", "--resume", str(run_dir), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    nodes = RunDB(run_dir / "run.db").nodes()
    assert len(nodes) == ITERATIONS and len({n.node for n in nodes}) == ITERATIONS
    assert {n.node for n in before} <= {n.node for n in nodes}
    assert json.loads(proc.stdout)["tasks"][0]["candidates"] == ITERATIONS
