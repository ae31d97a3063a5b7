"""records/: summary.json's rows and apply's report read back from what each kernforge wrote,
the oldest files included, and written again as they were."""

from __future__ import annotations

import pytest

from kernforge.records import Finalist, TaskRow

pytestmark = pytest.mark.unit

# a row of bench/results/h200/summary_attention.json: written before rows had compile times,
# finalists, real_inputs, stopped, seeded_from or a status
OLDEST_ROW = {"task": "t0-_softmax-9a5552e0", "op": "aten::_softmax.default", "shape": "4x8x512x512",
              "dtype": "float32", "share": 0.11635012588301331, "eager_p50_ms": 0.02316799946129322,
              "best_p50_ms": 0.020640000700950623, "best_speedup_vs_eager": 1.122480555934582,
              "best_node": "n0007", "verdict": "faster kernel found", "candidates": 12, "correct": 12,
              "status_counts": {"ok": 12}, "error": ""}


def test_the_oldest_row_reads_with_its_status_from_its_verdict():
    row = TaskRow.from_json(OLDEST_ROW)
    assert row.status == "faster" and row.best_node == "n0007" and row.status_counts == {"ok": 12}
    assert row.compile_p50_ms is None and row.finalists == {} and row.real_inputs == "all"
    assert {k: v for k, v in row.to_json().items() if k in OLDEST_ROW} == OLDEST_ROW


@pytest.mark.parametrize("verdict, status", [
    ("no faster kernel found; stopped early: the LLM budget", "no faster"),
    ("no correct kernel found (3 of 3 cheat: static scan)", "no correct"),
    ("correct kernel found (interpreter: not timed)", "not timed"),
    ("not searched: its baseline failed before the run stopped", "not searched"),
    ("faster kernel found; searched on fresh inputs of the captured signature", "faster")])
def test_an_old_verdict_gives_its_status(verdict, status):
    assert TaskRow.from_json({**OLDEST_ROW, "verdict": verdict}).status == status


def test_a_row_goes_out_and_back_unchanged():
    row = TaskRow(task="t1", op="aten::_softmax.default", shape="8x40", dtype="float32", share=0.5,
                  best_speedup_vs_eager=1.0, status="no faster", verdict="no faster kernel found",
                  finalists={"n0003": Finalist(search_speedup_vs_eager=1.3, status="ok", speedup_vs_eager=1.01)},
                  real_inputs="partial", candidates=4, correct=3, status_counts={"ok": 3, "crash": 1})
    data = row.to_json()
    assert data["finalists"] == {"n0003": {"search_speedup_vs_eager": 1.3, "status": "ok", "speedup_vs_eager": 1.01}}
    assert TaskRow.from_json(data) == row
