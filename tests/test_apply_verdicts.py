"""apply's end-to-end verdicts hold only where a second, interleaved measurement repeats them."""

from __future__ import annotations

import pytest

from kernforge.evaluate.timing import Timing
from kernforge.integrate.apply import _comparison, _confirm
from kernforge.report.views import e2e_text

pytestmark = pytest.mark.unit


def timing(p50: float, spread: float = 0.01) -> Timing:
    return Timing(p20_ms=p50 - spread, p50_ms=p50, p80_ms=p50 + spread, runs=50, method="cuda-events")


def test_a_gain_the_repeat_shows_again_stays_faster_with_both_figures():
    comparison = _comparison(timing(8.0), timing(10.0))
    _confirm(comparison, timing(8.1), timing(10.0))
    assert comparison["verdict"] == "faster" and comparison["speedup"] == pytest.approx(1.25)
    assert comparison["repeat_verdict"] == "faster" and comparison["repeat_speedup"] == pytest.approx(10 / 8.1)
    assert e2e_text(comparison) == "1.25x (repeat 1.23x)"


def test_a_gain_the_repeat_does_not_show_is_within_the_noise():
    comparison = _comparison(timing(9.0), timing(10.0))
    _confirm(comparison, timing(10.0), timing(10.0))
    assert comparison["verdict"] == "within noise" and comparison["first_verdict"] == "faster"
    assert e2e_text(comparison) == "1.11x (repeat 1.00x), within noise"
