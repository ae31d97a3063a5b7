"""kernforge.store: the run folder, results.tsv one line per candidate, and finding runs again."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from kernforge.records import ResultRow
from kernforge.records.results import RESULT_COLUMNS
from kernforge.store import RunStore, list_runs
from kernforge.store import run as run_module

pytestmark = pytest.mark.unit


def row(**values) -> ResultRow:
    blank = dict(task="t0-x", node="n0000", parent="", status="ok", failure_reason="", p50_ms=None, p20_ms=None,
                 p80_ms=None, eager_p50_ms=None, speedup_vs_eager=None, faster_than_eager=False, kept=False,
                 eval_s=0.0, rationale="")
    return ResultRow(**blank | values)


def test_result_columns():
    assert RESULT_COLUMNS[:5] == ["task", "node", "parent", "status", "failure_reason"]
    for column in ("p50_ms", "p20_ms", "p80_ms", "eager_p50_ms", "speedup_vs_eager",
                   "faster_than_eager", "kept", "eval_s", "rationale"):
        assert column in RESULT_COLUMNS
    assert len(set(RESULT_COLUMNS)) == len(RESULT_COLUMNS)


def test_results_tsv_has_the_columns_and_one_line_per_row(runs_dir: Path):
    store = RunStore.create(runs_dir, "m")
    store.append_result(row(node="n0000", p50_ms=0.123456789, kept=True, faster_than_eager=False))
    store.append_result(row(node="n0001", status="wrong_result",
                            failure_reason="on real0: output 0\n  worst at\tindex (1, 2)\n"))
    lines = (store.root / "results.tsv").read_text().splitlines()
    assert lines[0].split("\t") == RESULT_COLUMNS
    assert len(lines) == 3  # header + two rows, however many lines a reason had
    cells = list(csv.DictReader(lines, delimiter="\t"))
    assert cells[0]["p50_ms"] == "0.123457"  # floats to 6 significant digits
    assert cells[0]["kept"] == "True" and cells[0]["faster_than_eager"] == "False"
    assert cells[0]["p20_ms"] == "" and cells[0]["failure_reason"] == ""  # None is an empty cell
    rows = store.results()
    assert [r.node for r in rows] == ["n0000", "n0001"]
    assert rows[0].p50_ms == 0.123457 and rows[0].kept and not rows[0].faster_than_eager
    assert rows[0].p20_ms is None and rows[0].llm_tokens == 0
    assert rows[1].failure_reason == "on real0: output 0 worst at index (1, 2)"


def test_a_results_tsv_from_before_the_llm_columns_reads_with_them_empty(runs_dir: Path):
    store = RunStore.create(runs_dir, "m")
    oldest = RESULT_COLUMNS[:RESULT_COLUMNS.index("rationale") + 1]
    (store.root / "results.tsv").write_text("\t".join(oldest) + "\n"
                                            + "t0-x\tn0001\tn0000\tok\t\t0.5\t0.4\t0.6\t1\t2\tTrue\tTrue\t3.5\tfused\n")
    (r,) = store.results()
    assert (r.parent, r.p50_ms, r.speedup_vs_eager, r.kept, r.eval_s) == ("n0000", 0.5, 2.0, True, 3.5)
    assert (r.origin, r.model, r.llm_tokens, r.llm_cost_usd) == ("", "", 0, 0.0)


def test_results_of_a_new_run_are_empty(runs_dir: Path):
    assert RunStore.create(runs_dir, "m").results() == []


def test_create_names_the_folder_after_the_model_and_never_reuses_one(runs_dir: Path, monkeypatch):
    monkeypatch.setattr(run_module.time, "strftime", lambda fmt: "20260101-120000")
    first = RunStore.create(runs_dir, "my model/v2:big")
    second = RunStore.create(runs_dir, "my model/v2:big")
    third = RunStore.create(runs_dir, "my model/v2:big")
    assert first.root.name == "20260101-120000-my_model_v2_big"
    assert second.root.name == "20260101-120000-my_model_v2_big-2"
    assert third.root.name == "20260101-120000-my_model_v2_big-3"
    assert all(s.root.is_dir() and s.root.parent == runs_dir for s in (first, second, third))
    assert RunStore.create(runs_dir, "///").root.name.startswith("20260101-120000-")


def test_write_json_is_atomic_and_reads_back(runs_dir: Path):
    store = RunStore.create(runs_dir, "m")
    store.write_json("tasks/t0/nodes/n0/result.json", {"status": "ok", "path": Path("/x")})
    assert store.read_json("tasks/t0/nodes/n0/result.json") == {"status": "ok", "path": "/x"}
    store.write_json("tasks/t0/nodes/n0/result.json", {"status": "crash"})
    written = (store.root / "tasks/t0/nodes/n0/result.json").read_text()
    assert json.loads(written) == {"status": "crash"}
    assert list(store.root.rglob("*.tmp")) == []


def test_task_and_node_folders(runs_dir: Path):
    store = RunStore.create(runs_dir, "m")
    assert store.capture_dir == store.root / "capture"
    node = store.node_dir("t0-x", "n0003")
    assert node == store.root / "tasks" / "t0-x" / "nodes" / "n0003" and node.is_dir()
    assert store.task_dir("t0-x").is_dir()


def test_list_runs_finds_run_folders(runs_dir: Path, monkeypatch):
    stamps = iter(["20260101-000001", "20260101-000002", "20260101-000003"])
    monkeypatch.setattr(run_module.time, "strftime", lambda fmt: next(stamps))
    a = RunStore.create(runs_dir, "a")
    b = RunStore.create(runs_dir, "b")
    unfinished = RunStore.create(runs_dir, "no-config")
    for store in (b, a):
        store.write_json("config.json", {"model": store.root.name})
    (runs_dir / "stray-file.txt").write_text("not a run")
    found = list_runs(runs_dir)
    assert [s.root for s in found] == [a.root, b.root]  # sorted, oldest first
    assert unfinished.root not in [s.root for s in found]
    assert list_runs(runs_dir / "does-not-exist") == []


# ---------------------------------------------------------------- the phase breakdown

def test_phases_sum_per_phase_over_sessions_and_other_is_what_no_phase_covers():
    from kernforge.phases import PHASES
    from kernforge.store.events import PhaseTimed, RunEnded, RunStarted
    from kernforge.search.runs import run_phases

    events = [
        RunStarted(time=100.0, began=90.0),  # 10 s loading before the first event
        PhaseTimed(time=101.0, phase="load", seconds=10.0),
        PhaseTimed(time=110.0, phase="capture", seconds=9.0),
        PhaseTimed(time=120.0, phase="baselines", seconds=5.0, task="t0"),
        PhaseTimed(time=150.0, phase="candidates", seconds=30.0, task="t0"),
        # killed here: the session's wall is 90 -> 150; then resumed a day later
        RunStarted(time=90_000.0),
        PhaseTimed(time=90_020.0, phase="candidates", seconds=20.0, task="t0"),
        RunEnded(time=90_030.0),
        PhaseTimed(time=99_000.0, phase="apply", seconds=40.0),  # a later `kernforge apply`
    ]
    phases = run_phases(events)
    assert list(phases) == list(PHASES)
    assert phases["candidates"] == 50.0 and phases["apply"] == 40.0 and phases["load"] == 10.0
    # walls 60 + 30 s, of which 54 + 20 s are phases; the day between and the apply are not "other"
    assert phases["other"] == pytest.approx(16.0)


def test_phases_of_a_run_from_before_them_are_all_other():
    from kernforge.store.events import RunEnded, RunStarted
    from kernforge.search.runs import run_phases

    phases = run_phases([RunStarted(time=10.0), RunEnded(time=25.0)])
    assert phases["other"] == 15.0 and sum(phases.values()) == 15.0


def test_phases_line_names_each_phase_with_its_share():
    from kernforge.report import phases_line

    line = phases_line({"capture": 30.0, "candidates": 70.0, "oracle": 0.0})
    assert line == "time by phase (100 s): capture 30.0 s (30%), candidates 70.0 s (70%)"
    assert phases_line({}) == "time by phase: none recorded"


# ---------------------------------------------------------------- the phase under way

def test_phase_start_events_read_back_and_old_logs_without_them_still_load(tmp_path: Path):
    from kernforge.report.views import phase_now
    from kernforge.store.events import NodeFinished, PhaseStarted, RunStarted, event_from_json

    store = RunStore.create(tmp_path, "m")
    store.emit(RunStarted(model="m"))
    assert phase_now(store.events()) == ""  # a log from before phase_start: nothing said
    store.emit(PhaseStarted(phase="capture"))
    store.emit(PhaseStarted(phase="baselines", done=1, total=3, task="t1"))
    *_, capture, baselines = store.events()
    assert (capture.phase, capture.done, capture.total, capture.task) == ("capture", None, None, "")
    assert (baselines.phase, baselines.done, baselines.total, baselines.task) == ("baselines", 1, 3, "t1")
    assert phase_now(store.events()) == "baselines (1/3)"
    # a line cut short of its counts, or with counts of the wrong type, reads with none
    torn = event_from_json({"time": 1.0, "kind": "phase_start", "phase": "apply"})
    damaged = event_from_json({"time": 1.0, "kind": "phase_start", "phase": "candidates", "done": "two",
                               "total": 4.5})
    assert isinstance(torn, PhaseStarted) and (torn.phase, torn.done, torn.total) == ("apply", None, None)
    assert (damaged.done, damaged.total) == (None, None)
    searching = [PhaseStarted(phase="candidates", done=0, total=4, task="t0"), NodeFinished(task="t0", candidates=2)]
    assert phase_now(searching) == "candidates (2/4)"
    assert phase_now([*searching, RunStarted(resumed=True)]) == ""  # resumed: not yet in any phase


def test_config_json_reads_as_a_record_and_keeps_what_it_does_not_name():
    from kernforge.records.config import RunConfig

    raw = {"spec": "m.py", "model_name": "m", "model": {"dtype": "bf16"}, "resolved_backend": "triton",
           "device": "cuda", "device_name": "NVIDIA H200", "device_capability": "9.0", "format_version": 2,
           "iterations": 20, "kind": "eval", "versions": {"torch": "2.11"}, "created": "now"}
    config = RunConfig.from_json(raw)
    assert (config.backend, config.device, config.kind, config.iterations, config.model) == (
        "triton", "cuda", "eval", 20, {"dtype": "bf16"})
    assert config.raw["created"] == "now"
    old = RunConfig.from_json({"resolved_backend": "cpu", "device": "cpu"})  # a folder from before the fields
    assert (old.kind, old.format_version, old.device_capability, old.versions) == ("search", 0, "", {})


def test_a_config_json_that_is_no_record_is_said_not_raised(tmp_path):
    from kernforge.search.runs import read_run_partial

    (tmp_path / "config.json").write_text("[1, 2]")
    run = read_run_partial(tmp_path)
    assert run.config == {} and "config.json is not a record; it is left out" in run.problems


@pytest.mark.skipif(__import__("shutil").which("git") is None, reason="git is not installed")
def test_a_history_lock_left_by_a_stopped_run_does_not_stop_the_resumed_one(runs_dir: Path):
    """Ctrl-C during a kept candidate's commit leaves .git/index.lock; the resumed run's next commit
    went on failing (git add exit 128) and the search stopped with a traceback. A lock older than
    this process is cleared; and a history git refuses is no reason to stop a search."""
    import os

    store = RunStore.create(runs_dir, "m")
    first = store.commit_kept("t0-x", "int a;", ".c", "n0000")
    assert first is not None
    lock = store.task_dir("t0-x") / "history" / ".git" / "index.lock"
    lock.write_text("")
    os.utime(lock, (run_module._STARTED - 60, run_module._STARTED - 60))  # left before this process began
    second = store.commit_kept("t0-x", "int b;", ".c", "n0001")
    assert second is not None and second != first and not lock.exists()
    lock.write_text("")  # a lock of this process's own time is not touched: git refuses, the search goes on
    assert store.commit_kept("t0-x", "int c;", ".c", "n0002") is None and lock.exists()
