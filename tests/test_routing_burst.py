"""integrate/overhead.py: a routing-cost burst is sized from one timed call so that it takes
about BURST_HOST_S of host time, however slow the call. No worker is started."""

from __future__ import annotations

import time

import pytest
import torch

from kernforge.integrate import overhead
from kernforge.integrate.overhead import BURST, BURST_HOST_S, MIN_BURST, burst_size

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("call_s", "calls"), [
    (1e-6, BURST),  # a launch: the whole burst, as before the cap
    (BURST_HOST_S / BURST, BURST),
    (1e-3, 50),  # a CPU kernel of a millisecond: 50 ms of calls
    (5e-3, 10),
    (0.1, MIN_BURST),  # slower than the cap: still a few calls
    (0.0, BURST),  # too fast for the clock
])
def test_a_burst_takes_about_the_cap_in_host_time(call_s, calls):
    assert burst_size(call_s) == calls


def test_a_slow_call_is_timed_over_a_short_burst_and_keeps_its_size():
    calls = []

    def slow() -> None:
        calls.append(None)
        time.sleep(0.01)
    sizes: dict[str, int] = {}
    started = time.perf_counter()
    per_call_us = overhead._burst_us(slow, torch.device("cpu"), sizes, "slow")
    took = time.perf_counter() - started
    assert sizes["slow"] <= BURST_HOST_S / 0.01  # the sleep is at least 10 ms: at most 5 calls
    assert len(calls) == overhead.WARM_UP + sizes["slow"]
    assert per_call_us >= 10_000
    assert took < 0.5  # 200 calls would take 2 s
    sizes["slow"] = 7  # a later round reuses the size its first round chose, after a shorter warm-up
    calls.clear()
    overhead._burst_us(slow, torch.device("cpu"), sizes, "slow")
    assert len(calls) == 3 + 7


def test_the_routing_measure_is_expected_to_take_its_bursts_and_warm_ups():
    # an 80 ms kernel replacing a 128 ms ATen call (the attention example's chain on this CPU):
    # 3-call bursts, 5 + 3 calls in the first round and 1 + 3 in each of the 6 others
    assert overhead.expected_s(0.080, 0.128) == pytest.approx((2 * 0.080 + 3 * 0.128) * 32)
    # a 10 us launch: 200-call bursts, 2 ms each, well under a second for the whole measure
    assert overhead.expected_s(1e-5, 1e-5) == pytest.approx(5 * 1e-5 * (5 + 200 + 6 * 205))


@pytest.mark.parametrize(("burst", "warm"), [(200, 5), (10, 5), (7, 3), (3, 1)])
def test_a_later_burst_warms_up_with_at_most_half_its_calls(burst, warm):
    assert overhead.warm_calls(burst) == warm
