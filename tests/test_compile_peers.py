"""torch.compile peers are timed only where they decide something: once a candidate beats eager.

A scripted proposer hands the real search (search_task, greedy, worker processes) candidates of
the tiny model's softmax under `--compile default`: wrong ones time no peer; one that beats eager
gets its peer timed once, in a worker job of its own, and a resume keeps it.

Which correct candidate beats eager is not left to the clock: on a loaded 2-core machine eager's
tiny softmax (0.013 ms alone) measured 22 ms in one worker, and a kernel 20x slower than eager
passed for 80x faster. A candidate marked WINNER_MARK is said to beat eager instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import CORRECT_BODY, c_softmax_source
from test_search_failures import Scripted

from kernforge.backends import get_backend
from kernforge.records.evaluation import PEER_SKIPPED
from kernforge.search import engine, get_strategy, search_task
from kernforge.search.nodes import previous_nodes, task_row
from kernforge.search.runs import read_baseline
from kernforge.store import RunStore

pytestmark = pytest.mark.integration

CONSTANT = "    for (int64_t i = 0; i < rows * cols; ++i) y[i] = 0.5f;\n"
HALVED = CORRECT_BODY.replace("yr[c] /= s;", "yr[c] /= 2.0f * s;")
SLOW = "    volatile float sink = 0.0f;\n    for (int i = 0; i < 100000; ++i) sink += 1.0f;\n" + CORRECT_BODY
WINNER_MARK = "/* said to beat eager */\n"


def peer_events(store: RunStore) -> list:
    return [e for e in store.events() if e.kind == "phase" and e.phase == "compile_peers"]


def test_no_candidate_beats_eager_no_peer_is_timed(softmax_capture, tmp_path: Path):
    _, _, task = softmax_capture
    store = RunStore.create(tmp_path / "runs", "no-peer")
    proposer = Scripted([("constant", c_softmax_source(CONSTANT)), ("halved", c_softmax_source(HALVED))])
    outcome = search_task(task, store, get_backend("cpu"), "cpu", proposer, get_strategy("greedy"),
                          iterations=2, candidate_timeout_s=30.0, compile_modes=("default",))
    # a constant output is a cheat (outputs bit-identical across sets whose references differ)
    assert [n.result.status for n in outcome.nodes] == ["cheat", "wrong_result"]
    assert outcome.best is None
    assert not peer_events(store)
    assert not (store.task_dir(task.task_id) / "peers").exists()  # no peers job was started
    baseline = read_baseline(store, task.task_id)
    assert baseline.compiled == {} and baseline.compile_modes == ["default"]
    row = task_row(outcome)
    assert row.compile_p50_ms is None and row.compile_peer == PEER_SKIPPED


def test_a_winner_times_its_peer_once_and_a_resume_keeps_it(softmax_capture, tmp_path: Path, monkeypatch):
    real = engine.evaluate_candidate

    def judged(task_path, reference_path, source, *args, **kwargs):
        """The real evaluation; the marked candidate beats eager, the others do not."""
        result = real(task_path, reference_path, source, *args, **kwargs)
        if result.ok and result.timed:
            won = WINNER_MARK in Path(source).read_text()
            result.faster_than_eager, result.speedup_vs_eager = won, 2.0 if won else 0.5
        return result

    monkeypatch.setattr(engine, "evaluate_candidate", judged)
    _, _, task = softmax_capture
    store = RunStore.create(tmp_path / "runs", "peer")
    proposer = Scripted([("slow", c_softmax_source(SLOW)), ("winner", WINNER_MARK + c_softmax_source()),
                         ("after a resume", c_softmax_source(SLOW))])
    first = search_task(task, store, get_backend("cpu"), "cpu", proposer, get_strategy("greedy"),
                        iterations=2, candidate_timeout_s=30.0, compile_modes=("default",), finalists=0)
    assert first.best is not None and first.best.node_id == "n0001"
    assert len(peer_events(store)) == 1
    baseline = read_baseline(store, task.task_id)
    timing = baseline.compiled["default"]["timing"]
    assert timing and timing["p50_ms"] > 0, baseline.compiled
    row = task_row(first)
    assert row.compile_peer == "timed" and row.compile_p50_ms == timing["p50_ms"]
    assert row.best_speedup_vs_compile == pytest.approx(timing["p50_ms"] / first.best.final.timing.p50_ms)

    # The budget raised and the task searched again from its nodes: a new baseline, the same peer.
    again = search_task(task, store, get_backend("cpu"), "cpu", proposer, get_strategy("greedy"),
                        iterations=3, candidate_timeout_s=30.0, compile_modes=("default",), finalists=0,
                        previous=previous_nodes(store, task.task_id))
    assert len(again.nodes) == 3
    assert len(peer_events(store)) == 1
    assert again.baseline.compiled["default"]["timing"] == timing
    assert read_baseline(store, task.task_id).compiled["default"]["timing"] == timing
