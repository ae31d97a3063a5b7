"""records/: summary.json's rows and apply's report read back from what each kernforge wrote,
the oldest files included, and written again as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernforge.records import (Comparison, EndToEnd, Finalist, KernelEffect, RoundsMeasured, RouteCost, RoutedCalls,
                               TaskRow, VariantName)

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


# apply.json as written on the GPUs (bench/results): Gemma-style on the H100, before kernels
# carried their op times, with compile's pair and reduce-overhead's; the SD3.5 VAE decoder on the
# H200, with the CUDA-graph pair too
APPLY_FILES = sorted((Path(__file__).parent / "fixtures").glob("apply_*.json"))


@pytest.mark.parametrize("path", APPLY_FILES, ids=lambda p: p.stem)
def test_an_apply_file_reads_and_writes_back_what_it_held(path: Path):
    data = json.loads(path.read_text())
    back = EndToEnd.from_json(data).to_json()
    # keys a kernel effect or a route's cost gained since (op times, burst sizes) are added; nothing it held changes
    for key in ("kernels", "routing"):
        back[key] = [{k: v for k, v in b.items() if k in a} for a, b in zip(data[key], back[key])]
    assert {k: back[k] for k in data} == data


def test_an_apply_file_reads_into_fields():
    report = EndToEnd.from_json(json.loads(APPLY_FILES[0].read_text()))
    eager = report.comparison(VariantName.PATCHED_EAGER)
    assert eager.baseline == VariantName.EAGER and eager.verdict == "faster" and eager.repeat_verdict == "faster"
    assert report.comparison(VariantName.PATCHED_COMPILE, VariantName.EAGER).verdict == "faster"
    assert report.comparison(VariantName.PATCHED_COMPILE).verdict == "within noise"
    assert report.compiled and report.timings_ms[VariantName.PATCHED_EAGER].runs == 150
    assert [(k.eager_verdict, k.installed_eager) for k in report.kernels][:2] == [("slower", False),
                                                                                 ("within noise", True)]


def test_an_apply_file_reads_its_routes_into_fields():
    report = EndToEnd.from_json(json.loads(APPLY_FILES[-1].read_text()))
    (cost,) = report.routing
    assert cost.native and cost.via == "op" and cost.fewest_burst_calls is None
    assert cost.hit_vs_aten == pytest.approx(cost.routed_hit_us / cost.aten_us)
    calls = report.graph_routes[VariantName.RO_PATCHED]["aten::native_group_norm.default"]
    assert (calls.custom_op, calls.fallback, calls.kernel) == (18, 72, 0)
    assert calls.traced_by_kernel == {cost.kernel: 18}


# a routing row of bench/results' first GPU runs: before routes had a way (via), a native call
# or the ATen call's time
OLDEST_ROUTE = {"op": "aten::_softmax.default", "kernel": "k", "direct_us": 10.0, "routed_hit_us": 12.5,
                "original_us": 8.0, "routed_miss_us": 9.0, "unpatched_op_us": 3.0, "unpatched_op_patched_us": 3.5,
                "hit_overhead_us": 2.5, "miss_overhead_us": 1.0}


def test_the_oldest_route_reads_and_writes_back_what_it_held():
    cost = RouteCost.from_json(OLDEST_ROUTE)
    assert cost.via == "op" and not cost.native and cost.aten_us is None and cost.hit_vs_aten is None
    assert {k: v for k, v in cost.to_json().items() if k in OLDEST_ROUTE} == OLDEST_ROUTE


def test_a_route_cost_writes_the_keys_apply_json_always_had_in_their_order():
    cost = RouteCost(op="aten::_softmax.default", kernel="k", direct_us=10.0, aten_us=20.0, routed_hit_us=12.0,
                     original_us=8.0, routed_miss_us=9.0, unpatched_op_us=3.0, unpatched_op_patched_us=3.5,
                     via="module", native=True, python_direct_us=30.0, fewest_burst_calls=200)
    data = cost.to_json()
    assert list(data) == ["op", "kernel", "direct_us", "aten_us", "routed_hit_us", "original_us", "routed_miss_us",
                          "unpatched_op_us", "unpatched_op_patched_us", "via", "native", "python_direct_us",
                          "fewest_burst_calls", "hit_spread_us", "miss_spread_us", "hit_overhead_us",
                          "miss_overhead_us", "hit_vs_aten"]
    assert (data["hit_overhead_us"], data["miss_overhead_us"], data["hit_vs_aten"]) == (2.0, 1.0, 0.6)
    assert RouteCost.from_json(data) == cost


def test_a_route_cost_inside_its_rounds_spread_is_said_not_measured():
    """A 2-4 ms CPU kernel's bursts of 6 calls spread by milliseconds: its +2215 us read from them
    is no host cost, and the line says so; a cost beyond the spread is reported as it was."""
    from kernforge.report.tables import _route_line

    noisy = RouteCost(op="chain:x", kernel="k", direct_us=2230.3, aten_us=3847.2, routed_hit_us=4445.7,
                      original_us=3589.2, routed_miss_us=3210.8, unpatched_op_us=1.4, unpatched_op_patched_us=1.6,
                      via="placeholders", hit_spread_us=2600.0, miss_spread_us=900.0)
    line = _route_line(noisy)
    assert "+2215.4 us per call taking the kernel (within the rounds' spread of 2600.0 us: not measured)" in line
    assert "-378.4 us per call falling back (within the rounds' spread of 900.0 us: not measured)" in line
    clear = RouteCost(op="chain:x", kernel="k", direct_us=10.0, aten_us=20.0, routed_hit_us=15.0, original_us=8.0,
                      routed_miss_us=9.0, unpatched_op_us=1.4, unpatched_op_patched_us=1.6, hit_spread_us=0.8,
                      miss_spread_us=None)
    assert "+5.0 us per call taking the kernel (15.0 us" in _route_line(clear) and "not measured" not in _route_line(clear)


def test_routed_calls_and_rounds_go_out_and_back_unchanged():
    calls = RoutedCalls(kernel=3, fallback=1, by_kernel={"k": 3})
    assert calls.to_json() == {"kernel": 3, "custom_op": 0, "fallback": 1, "by_kernel": {"k": 3},
                               "traced_by_kernel": {}}
    measured = RoundsMeasured(variants=["eager", "patched eager"], rounds=2, calls={"eager": 3}, cut=True)
    assert list(measured.to_json()) == ["variants", "rounds", "calls", "cut"]
    report = EndToEnd(graph_routes={VariantName.GRAPH_PATCHED: {"aten::_softmax.default": calls}}, rounds=[measured])
    back = EndToEnd.from_json(report.to_json())
    assert back.graph_routes == report.graph_routes and back.rounds == [measured]


@pytest.mark.parametrize("candidate, text, kernels", [
    (VariantName.PATCHED_EAGER, "no kernel installed in eager: the model as it is", "none installed"),
    (VariantName.PATCHED_COMPILE, "no kernel installed under compile: the compiled model as it is", "none installed"),
    (VariantName.PATCHED_EAGER, "slower: every kernel dropped in eager, the model as it is", "all dropped")])
def test_a_verdict_said_in_a_sentence_reads_as_a_state_and_is_written_again(candidate, text, kernels):
    key = f"{candidate} vs {'eager' if candidate == VariantName.PATCHED_EAGER else 'compile'}"
    comparison = Comparison.from_json(key, {"speedup": 0.9, "verdict": text})
    assert comparison.kernels == kernels and not comparison.installed
    assert comparison.to_json() == {"speedup": 0.9, "verdict": text}


@pytest.mark.parametrize("text, verdict, with_others, in_graph", [
    ("faster (with the others)", "faster", True, True), ("slower", "slower", False, True),
    ("not in the compiled graph", "within noise", False, False), ("", None, False, False)])
def test_a_kernels_compile_verdict_reads_into_fields_and_back(text, verdict, with_others, in_graph):
    effect = KernelEffect.from_json({"task": "t0", "op": "aten::_softmax.default", "kernel": "k", "op_speedup_vs_eager": 2.0,
                                     "compile_verdict": text, "in_compiled_graph": in_graph, "eager_verdict": ""})
    assert (effect.compile_verdict, effect.compiled_with_others, effect.eager_verdict) == (verdict, with_others, None)
    assert effect.to_json()["compile_verdict"] == text and effect.to_json()["eager_verdict"] == ""


def test_what_holds_no_report_reads_as_none_and_an_error_as_one():
    assert [EndToEnd.read(x) for x in (None, {}, [1, 2], {"timings_ms": {"eager": {}}})] == [None] * 4
    failed = EndToEnd.read({"error": "apply failed: RuntimeError"})
    assert failed.error == "apply failed: RuntimeError" and failed.to_json() == {"error": "apply failed: RuntimeError"}


def test_a_way_this_kernforge_does_not_know_is_left_out():
    report = EndToEnd.from_json({"timings_ms": {"eager": {"p50_ms": 1.0}, "eager, on a TPU": {"p50_ms": 0.5}},
                                 "speedups": {"eager, on a TPU vs eager": {"speedup": 2.0, "verdict": "faster"}}})
    assert list(report.timings_ms) == [VariantName.EAGER] and report.comparisons == []


def test_a_summary_keeps_what_it_does_not_know_and_reads_its_report():
    from kernforge.records import RunSummary

    data = {"run_dir": "runs/x", "model": "m", "backend": "cpu", "device": "cpu", "wall_s": 3.0,
            "phases": {"capture": 1.0}, "tasks": [OLDEST_ROW], "skipped": [],
            "end_to_end": {"error": "apply failed: RuntimeError"}, "from_a_newer_kernforge": [1]}
    summary = RunSummary.from_json(data)
    assert summary.tasks[0].status == "faster" and summary.end_to_end.error.startswith("apply failed")
    assert summary.to_json() == {**data, "tasks": [TaskRow.from_json(OLDEST_ROW).to_json()]}
