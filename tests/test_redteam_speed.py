"""The red team's cheats that the harness disarms (their trick taken away, they compute honestly:
catalogue ok_if) must not be reported faster than eager. A claim about the clock: run alone, in
the timing tier, where a neighbour's load cannot make eager look slow."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "redteam"))
from catalogue import CATALOGUE  # noqa: E402

pytestmark = pytest.mark.timing

DISARMED = [r for r in CATALOGUE if not r.gpu and not r.honest and r.ok_if]


@pytest.mark.parametrize("record", DISARMED, ids=lambda r: r.id)
def test_a_disarmed_cheat_is_rejected_or_no_faster(record, evaluate_source, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    result = evaluate_source(record.path.read_text(), backend=record.backend, suffix=record.path.suffix,
                             timeout_s=60)
    detail = f"{record.id}: {result.status}: {result.reason}\n{result.log_tail[-1500:]}"
    assert result.status in ("ok", *record.expected), detail
    assert not result.faster_than_eager, f"a cheat whose trick was taken away reported faster: {detail}"
