"""integrate/pace.py and endtoend.time_variants under a time limit: the calls per round and the
rounds sized to a measurement's part of the limit, at least two rounds, more only while the
verdict is open and time remains. No worker is started."""

from __future__ import annotations

import time

import pytest
import torch

from kernforge.integrate import endtoend as e2e
from kernforge.integrate.apply import expected_measurements
from kernforge.integrate.pace import (MAX_ROUNDS, MIN_CALLS, MIN_ROUNDS, Pace, another_round, calls_per_round,
                                      rounds_span, was_cut)
from kernforge.records import RoundsMeasured
from kernforge.records.timing import Timing

pytestmark = pytest.mark.unit


def test_calls_per_round_stay_as_without_a_limit_where_two_rounds_fit():
    assert calls_per_round({"eager": 0.003, "patched": 0.002}, {"eager": 50, "patched": 50}, part_s=1.0) == \
        {"eager": 50, "patched": 50}


def test_calls_per_round_are_cut_in_proportion_so_that_two_rounds_fit():
    # 50 calls of 10 ms each is 1 s a round for two variants: 2 rounds in 0.5 s is a quarter of that
    calls = calls_per_round({"eager": 0.01, "patched": 0.01}, {"eager": 50, "patched": 50}, part_s=0.5)
    assert calls == {"eager": 12, "patched": 12}
    assert sum(c * 0.01 for c in calls.values()) * MIN_ROUNDS <= 0.5


def test_calls_per_round_never_go_under_the_minimum():
    assert calls_per_round({"eager": 1.0}, {"eager": 3}, part_s=0.0) == {"eager": MIN_CALLS}


def test_two_rounds_run_whatever_the_time_left():
    assert another_round(0, 5, round_s=0.0, elapsed_s=0.0, part_s=0.0, open_=False)
    assert another_round(1, 5, round_s=10.0, elapsed_s=10.0, part_s=0.0, open_=False)
    assert not another_round(MIN_ROUNDS, 5, round_s=10.0, elapsed_s=20.0, part_s=0.0, open_=True)


def test_rounds_go_on_to_the_default_while_they_fit():
    assert another_round(3, 5, round_s=1.0, elapsed_s=3.0, part_s=4.5, open_=False)
    assert not another_round(3, 5, round_s=1.0, elapsed_s=3.0, part_s=3.5, open_=False)


def test_past_the_default_only_while_the_verdict_is_open_and_up_to_the_most():
    assert not another_round(5, 5, round_s=1.0, elapsed_s=5.0, part_s=100.0, open_=False)
    assert another_round(5, 5, round_s=1.0, elapsed_s=5.0, part_s=100.0, open_=True)
    assert not another_round(MAX_ROUNDS, 5, round_s=1.0, elapsed_s=5.0, part_s=100.0, open_=True)


def test_a_measurement_is_cut_when_the_limit_stopped_it_before_it_would_have():
    assert was_cut(2, 5, open_=False)  # before the default
    assert was_cut(6, 5, open_=True)  # the verdict still open
    assert not was_cut(5, 5, open_=False)
    assert not was_cut(MAX_ROUNDS, 5, open_=True)


def test_each_measurement_gets_an_equal_part_of_what_is_left_less_the_routing():
    pace = Pace.starting(limit_s=100.0, started=0.0, routing_s=6.0, expected=4)
    assert pace.part_s(now=10.0) == pytest.approx((100.0 - 6.0 - 10.0) / 4)
    pace.record(RoundsMeasured(variants=["eager"], rounds=2, calls={"eager": 3}, cut=True))
    assert pace.part_s(now=10.0) == pytest.approx((100.0 - 6.0 - 10.0) / 3)
    assert pace.part_s(now=1000.0) == 0.0
    assert pace.cut == 1 and rounds_span([2, 7, 5]) == "2-7" and rounds_span([5, 5]) == "5"


def test_apply_expects_more_measurements_under_compile_and_on_a_gpu():
    assert expected_measurements(1, compile_model=False, cuda=False) == 3
    assert expected_measurements(3, compile_model=True, cuda=False) == 3 + 2 + 3
    assert expected_measurements(1, compile_model=True, cuda=True) == 3 + 2 + 4


def timing(p50: float, spread: float) -> Timing:
    return Timing(p20_ms=p50 - spread, p50_ms=p50, p80_ms=p50 + spread, runs=10, method="wall-clock")


def test_the_verdict_is_open_while_a_variant_is_within_the_noise_of_the_first():
    assert e2e.verdict_open({"eager": timing(10.0, 1.0), "patched": timing(9.5, 1.0)})
    assert not e2e.verdict_open({"eager": timing(10.0, 0.1), "patched": timing(8.0, 0.1)})
    assert not e2e.verdict_open({"eager": timing(10.0, 0.1)})


def sleeper(seconds: float):
    def call() -> None:
        time.sleep(seconds)
    return call


def test_a_tight_limit_runs_two_rounds_of_few_calls_and_says_it_was_cut():
    pace = Pace(deadline=time.perf_counter() + 0.2, expected=1)
    variants = [e2e.Variant("eager", sleeper(0.01)), e2e.Variant("patched", sleeper(0.01))]
    started = time.perf_counter()
    timings = e2e.time_variants(variants, torch.device("cpu"), pace=pace)
    took = time.perf_counter() - started
    (measured,) = pace.done
    assert measured.rounds == MIN_ROUNDS and measured.cut
    assert measured.calls == {"eager": MIN_CALLS, "patched": MIN_CALLS}
    assert timings["eager"].runs == MIN_ROUNDS * MIN_CALLS
    assert took < 1.0  # without the limit: 5 rounds of 15 calls of each, 1.5 s at least


def test_a_clear_verdict_with_time_to_spare_runs_the_default_rounds_and_no_more():
    pace = Pace(deadline=time.perf_counter() + 60.0, expected=1)
    variants = [e2e.Variant("eager", sleeper(0.004)), e2e.Variant("faster", sleeper(0.0005))]
    e2e.time_variants(variants, torch.device("cpu"), rounds=3, pace=pace)
    (measured,) = pace.done
    assert measured.rounds == 3 and not measured.cut


def test_the_printed_report_says_the_limit_and_the_rounds():
    from kernforge.records import EndToEnd
    from kernforge.report import end_to_end_tables

    report = {"model": "m", "device": "cpu", "time_limit_s": 60.0, "wall_s": 41.2, "notes": ["cut note"],
              "rounds": [{"variants": ["eager", "patched eager"], "rounds": 2, "calls": {}, "cut": True},
                         {"variants": ["eager", "patched eager"], "rounds": 7, "calls": {}, "cut": False}]}
    lines = [item for item in end_to_end_tables(EndToEnd.from_json(report)) if isinstance(item, str)]
    assert "apply's time limit 60 s: 2-7 timing rounds in each of 2 measurements, in 41 s" in lines
    assert "cut note" in lines
    untimed = EndToEnd.from_json({**report, "time_limit_s": None})
    assert not [line for line in end_to_end_tables(untimed) if "time limit" in str(line)]
