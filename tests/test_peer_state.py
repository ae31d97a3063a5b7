"""What a task says of its torch.compile peer (timed, failed, skipped, not asked), which peers a
resume keeps, and the compile cell of the results table. The searches that time or skip one:
test_compile_peers.py."""

from __future__ import annotations

import pytest

from kernforge.records.evaluation import PEER_PENDING, PEER_SKIPPED, Baseline
from kernforge.records.summary import TaskRow
from kernforge.records.timing import Timing
from kernforge.report.tables import _compile_cell
from kernforge.search.engine import timed_peers

pytestmark = pytest.mark.unit

EAGER = Timing(p20_ms=0.9, p50_ms=1.0, p80_ms=1.1, runs=10, method="wall-clock")
TIMED = {"default": {"timing": {"p20_ms": 0.4, "p50_ms": 0.5, "p80_ms": 0.6}, "error": ""}}
FAILED = {"default": {"timing": None, "error": "BackendCompilerFailed: no inductor here"}}


def baseline(modes: list[str], compiled: dict | None = None) -> Baseline:
    return Baseline(eager=EAGER, device_name="cpu", labels=["real0"], eager_errors=[[0.0]],
                    compiled=compiled or {}, compile_modes=modes)


def test_a_peer_is_pending_while_the_task_runs_and_skipped_once_it_ended_without_a_winner():
    b = baseline(["default"])
    assert b.peers_wanted
    assert b.peer_state(task_done=False) == PEER_PENDING
    assert b.peer_state(task_done=True) == PEER_SKIPPED


def test_a_timed_or_failed_peer_says_so_and_is_wanted_no_more():
    assert baseline(["default"], TIMED).peer_state(task_done=True) == "timed"
    assert baseline(["default"], FAILED).peer_state(task_done=True) == (
        "failed: default: BackendCompilerFailed: no inductor here")
    assert not baseline(["default"], TIMED).peers_wanted


def test_compile_none_asks_for_no_peer_and_old_records_read_as_timed():
    assert not baseline([]).peers_wanted
    assert baseline([]).peer_state(task_done=True) == "not asked (--compile none)"
    # a baseline.json from before peers were timed on demand: every mode timed, no compile_modes
    assert baseline([], TIMED).peer_state(task_done=True) == "timed"


def test_a_resume_keeps_peers_timed_for_every_mode_it_asks_for_and_nothing_else():
    assert timed_peers(baseline(["default"], TIMED), ("default",)) == TIMED
    assert timed_peers(baseline([], TIMED), ("default",)) == TIMED  # an old record's
    assert timed_peers(baseline(["default"], FAILED), ("default",)) == {}  # tried again
    assert timed_peers(baseline(["default"], TIMED), ("default", "max-autotune-no-cudagraphs")) == {}
    assert timed_peers(baseline(["default"], TIMED), ()) == {}  # --compile none now
    assert timed_peers(None, ("default",)) == {}


def test_the_results_tables_compile_cell_names_a_skipped_or_pending_peer():
    def row(**fields):
        return TaskRow(task="t0", op="aten::_softmax.default", shape="4x8", dtype="float32", share=1.0, **fields)

    assert _compile_cell(row(compile_p50_ms=0.5, compile_peer="timed")) == "0.5000"
    assert _compile_cell(row(compile_peer=PEER_SKIPPED)) == "skipped"
    assert _compile_cell(row(compile_peer=PEER_PENDING)) == "not timed yet"
    assert _compile_cell(row(compile_peer="not asked (--compile none)")) == "-"
    assert _compile_cell(TaskRow.from_json({"task": "t0", "op": "x", "shape": "", "dtype": "", "share": 0.1})) == "-"  # a summary from before
