"""The red-team catalogue (tests/redteam/): every cheat rejected, every honest kernel accepted.

The cases were written as an attacker would, against the evaluator as it was before its
defences were rebuilt by construction (bench/results/cpu/redteam/before.txt: it accepted 36
of them and crashed on two). Each runs through the real pipeline on the softmax task of
tests/models/tiny_softmax.py: C on the cpu backend, Triton under the interpreter. The GPU
cases (tests/redteam/gpu/) run on the H200 (bench/h200_issue15.sh).

A case whose trick only fires on a condition the evaluator now takes away (a stale finished
output buffer, an input address seen before) may also come back "ok": it then computes
honestly on every call, and it must not be reported faster than eager.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "redteam"))
from catalogue import CATALOGUE, Record, check, reason_holds  # noqa: E402

pytestmark = pytest.mark.integration

CPU_CASES = [r for r in CATALOGUE if not r.gpu]


def test_the_catalogue_is_well_formed():
    check()
    assert len([r for r in CATALOGUE if not r.honest]) >= 40


@pytest.mark.parametrize("record", CPU_CASES, ids=lambda r: r.id)
def test_red_team_case(record: Record, evaluate_source, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    result = evaluate_source(record.path.read_text(), backend=record.backend, suffix=record.path.suffix,
                             timeout_s=60)
    detail = f"{record.id}: {result.status}: {result.reason}\n{result.log_tail[-1500:]}"
    print(f"{record.id}: {result.status}: {result.reason[:200]}")
    if record.honest:
        assert result.status == "ok", detail
        return
    if result.status == "ok":
        # accepted only where the harness takes the trick away; that it is then no faster is
        # the timing tier's to say (test_redteam_speed.py): beside another test it is noise
        assert record.ok_if, f"a cheat accepted: {detail}"
        return
    assert result.status in record.expected, detail
    assert result.reason.strip(), detail
    assert reason_holds(record, result.reason), detail
