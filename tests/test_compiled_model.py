"""kernforge.capture.compiled on a real model: a small attention block compiled by inductor on the
CPU, profiled, and its kernels attributed to the captured ops (one compile, ~15 s on 2 cores)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import TESTS_DIR

from kernforge.capture import capture_model, load_capture
from kernforge.capture.compiled import OUTSIDE, from_json
from kernforge.models import load_model

pytestmark = pytest.mark.integration

MODEL = TESTS_DIR / "models" / "tiny_attention_chain.py"


def test_the_compiled_attention_blocks_kernels_are_attributed_to_its_ops_and_chain(tmp_path: Path):
    torch.manual_seed(0)
    loaded = load_model(str(MODEL), torch.device("cpu"))
    cap = capture_model(loaded, tmp_path, repeats=1, under_compile=True)
    result = from_json(cap.compiled)
    assert result is not None and not result.error, result
    assert cap.ranked_by_compile and result.passes > 0 and result.total_us > 0
    # inductor fuses scale, mask and softmax into one kernel and calls addmm and bmm as library
    # kernels: every one of them gets compiled time, and together they hold most of the forward
    by_op = {}
    for p in cap.ranked(("compute",)):
        by_op[p.op] = by_op.get(p.op, 0.0) + p.compiled_us
    for op in ("aten::_softmax.default", "aten::addmm.default", "aten::bmm.default", "aten::mul.Tensor",
               "aten::add.Tensor"):
        assert by_op.get(op, 0.0) > 0, f"{op} got no compiled time: {by_op}; unmapped {result.unmapped}"
    # on 2 cores the wrapper and guards around these microsecond kernels can outweigh them, so the
    # share is taken of the kernels' own time: what lies outside any kernel is listed, not attributed
    outside = sum(r["us"] for r in result.unmapped if r["kernel"] == OUTSIDE["cpu"])
    assert result.attributed_us > 0.5 * (result.total_us - outside), result
    (chain,) = cap.ranked(("chain",))
    assert chain.compiled_us > 0 and chain.floor_us > 0 and chain.headroom_us is not None
    # what no op accounts for is listed, never given to one
    assert sum(r["us"] for r in result.unmapped) <= result.total_us - result.attributed_us + 1e-6
    assert load_capture(tmp_path) == cap  # profile.json carries the fields
