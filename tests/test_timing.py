"""kernforge.harness.timing: the verdicts that decide whether a GPU timing can be trusted.

The figures are the ones measured on the H200 (bench/results/h200/evaluator_check*.json):
a side-stream cheat and honest kernels on the same ops.
"""

from __future__ import annotations

import pytest

from kernforge.harness.timing import confirmed_by_sync, escaped_ms, escapes_the_events
from kernforge.records.timing import Timing

pytestmark = pytest.mark.unit


def timing(p50_ms: float, synced_ms: float | None) -> Timing:
    return Timing(p20_ms=p50_ms, p50_ms=p50_ms, p80_ms=p50_ms, runs=1, method="test", synced_ms=synced_ms)


def test_a_side_stream_cheat_on_a_small_op_gets_no_speedup():
    # too little escaped work to call it a cheat above the noise, but its speedup is refused
    cheat, eager = timing(0.0023, 0.0220), timing(0.0046, 0.0163)
    assert not confirmed_by_sync(cheat, eager)


def test_hidden_work_larger_than_the_sync_noise_is_caught():
    # events see 2 us, the device is busy 42 us: 25 us escaped beyond eager's 15 us gap
    cheat, eager = timing(0.002, 0.042), timing(0.023, 0.038)
    assert escaped_ms(cheat, eager) > 0.010
    assert escapes_the_events(cheat, eager)


def test_honest_kernels_measured_on_the_h200_pass():
    for candidate, eager in [
        (timing(0.0046, 0.0208), timing(0.0051, 0.0221)),  # Triton, small op
        (timing(0.0053, 0.0164), timing(0.0050, 0.0164)),  # CUDA, small op
        (timing(0.0222, 0.0381), timing(0.0229, 0.0412)),  # Triton, (4, 8, 512, 512)
        (timing(0.0381, 0.0585), timing(0.0235, 0.0385)),  # CUDA, slower than eager
        (timing(0.0215, 0.0417), timing(0.0230, 0.0349)),  # Triton, 8.3 us 'escaped': sync noise
    ]:
        assert not escapes_the_events(candidate, eager)


def test_paired_gaps_decide_when_both_timings_have_them():
    # The H200 search's false cheat: a two-launch group norm, events 0.0211 ms, synchronised
    # 0.0624 ms against eager's smaller difference, because the host was busier when it was
    # timed. Its paired gap (the least over the calls) matches eager's: not a cheat. The gaps
    # here are made up: the per-call gap has not been measured on a GPU yet.
    honest = Timing(p20_ms=0.02, p50_ms=0.0211, p80_ms=0.03, runs=50, method="test", synced_ms=0.0624,
                    sync_gap_ms=0.006)
    eager = Timing(p20_ms=0.24, p50_ms=0.245, p80_ms=0.25, runs=50, method="test", synced_ms=0.256,
                   sync_gap_ms=0.0055)
    assert escaped_ms(honest, eager) < 0.001 and not escapes_the_events(honest, eager)
    # work on a side stream lengthens every call's gap, so its least value too
    cheat = Timing(p20_ms=0.002, p50_ms=0.002, p80_ms=0.002, runs=50, method="test", synced_ms=0.042,
                   sync_gap_ms=0.036)
    assert escapes_the_events(cheat, eager)
    # the honest one's speedup stands despite its stretched synchronised median; an escape does not
    assert confirmed_by_sync(honest, eager)
    small_cheat = Timing(p20_ms=0.002, p50_ms=0.002, p80_ms=0.002, runs=50, method="test", synced_ms=0.03,
                         sync_gap_ms=0.0055 + 0.3)  # 0.3 ms escaped against eager's 0.245
    assert not confirmed_by_sync(small_cheat, eager)


def test_honest_speedups_are_confirmed():
    assert confirmed_by_sync(timing(0.0046, 0.0208), timing(0.0051, 0.0221))
    assert confirmed_by_sync(timing(0.0200, 0.0360), timing(0.0236, 0.0400))


def test_cpu_timings_have_no_sync_measurement_and_no_verdict():
    assert not escapes_the_events(timing(1.0, None), timing(2.0, None))
    assert confirmed_by_sync(timing(1.0, None), timing(2.0, None))
