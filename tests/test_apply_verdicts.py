"""apply's end-to-end verdicts hold only where a second, interleaved measurement repeats them."""

from __future__ import annotations

import pytest

from kernforge.integrate.apply import _comparison, _confirm
from kernforge.records import EndToEnd, KernelEffect, VariantName
from kernforge.records.timing import Timing
from kernforge.report.views import e2e_text

pytestmark = pytest.mark.unit

EAGER, PATCHED = VariantName.EAGER, VariantName.PATCHED_EAGER


def timing(p50: float, spread: float = 0.01) -> Timing:
    return Timing(p20_ms=p50 - spread, p50_ms=p50, p80_ms=p50 + spread, runs=50, method="cuda-events")


def test_a_gain_the_repeat_shows_again_stays_faster_with_both_figures():
    comparison = _comparison(PATCHED, EAGER, timing(8.0), timing(10.0))
    _confirm(comparison, timing(8.1), timing(10.0))
    assert comparison.verdict == "faster" and comparison.speedup == pytest.approx(1.25)
    assert comparison.repeat_verdict == "faster" and comparison.repeat_speedup == pytest.approx(10 / 8.1)
    assert e2e_text(comparison) == "1.25x (repeat 1.23x)"


def test_a_gain_the_repeat_does_not_show_is_within_the_noise():
    comparison = _comparison(PATCHED, EAGER, timing(9.0), timing(10.0))
    _confirm(comparison, timing(10.0), timing(10.0))
    assert comparison.verdict == "within noise" and comparison.first_verdict == "faster"
    assert e2e_text(comparison) == "1.11x (repeat 1.00x), within noise"
    assert comparison.to_json() == {"speedup": pytest.approx(10 / 9), "verdict": "within noise",
                                    "repeat_speedup": 1.0, "repeat_verdict": "within noise", "first_verdict": "faster"}


def test_kernels_that_make_the_model_slower_together_are_dropped_in_eager():
    from kernforge.integrate.apply import drop_if_slower

    kept = [KernelEffect(task="t0", op="chain:a", kernel="k0", op_speedup_vs_eager=7.5, installed_eager=True),
            KernelEffect(task="t1", op="chain:b", kernel="k1", op_speedup_vs_eager=7.0, installed_eager=True, note="n")]
    comparison = _comparison(PATCHED, EAGER, timing(7.3), timing(6.3))
    _confirm(comparison, timing(7.2), timing(6.3))
    drop_if_slower(comparison, kept)
    assert not any(k.installed_eager for k in kept)
    assert kept[1].note.startswith("n; the model with every kept kernel was slower (0.86x")
    assert comparison.kernels == "all dropped" and comparison.verdict == "slower"
    assert comparison.to_json()["verdict"].startswith("slower: every kernel dropped")
    faster = _comparison(PATCHED, EAGER, timing(6.0), timing(6.3))
    again = [KernelEffect(task="t0", op="chain:a", kernel="k0", op_speedup_vs_eager=7.5, installed_eager=True)]
    drop_if_slower(faster, again)
    assert again[0].installed_eager


def test_ls_shows_the_model_end_to_end_as_apply_measured_it():
    from kernforge.cli.runs import _end_to_end_cell

    report = {"speedups": {"patched eager vs eager": {"speedup": 1.3312, "verdict": "faster"},
                           "compile vs eager": {"speedup": 2.5, "verdict": "faster"},
                           "patched compile vs compile": {"speedup": 1.004, "verdict": "within noise"}}}
    assert _end_to_end_cell(EndToEnd.read(report)) == "1.33x eager (faster), 1.00x compile (within noise)"
    none = {"speedups": {"patched eager vs eager": {
        "speedup": 0.98, "verdict": "no kernel installed in eager: the model as it is"}}}
    assert _end_to_end_cell(EndToEnd.read(none)) == "0.98x eager"  # the model as it is: no verdict
    assert _end_to_end_cell(None) == "not applied"
    assert _end_to_end_cell(EndToEnd.read({"error": "apply failed: the model raised"})).startswith("apply failed:")
