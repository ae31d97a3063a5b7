"""The cumsum family: cumulative sums over any dim.

What it takes (the forms capture records) and why not, its starting rules on realistic
shapes, and the proposer end to end. Nothing here builds a kernel: the sweep (test_sweep.py,
on the cases of sweep_cases.py) checks the kernels on every backend, and test_family_kernels.py
that a float32 running sum in float32 fails long rows.
"""

from __future__ import annotations

import family_check
import pytest
import torch
from family_check import make_task, tensor

from kernforge.capture.recorder import Recorder
from kernforge.propose.builtin import Hardware
from kernforge.propose.families import cumsum

pytestmark = pytest.mark.unit

OP = "aten::cumsum.default"
HW = Hardware()


def facts_of(args):
    facts = cumsum.match(make_task(OP, args))
    assert not isinstance(facts, str), facts
    return facts


# ---------------------------------------------------------------- what is supported

@pytest.mark.parametrize("call, outer, r, inner", [
    (lambda x: x.cumsum(-1), 24, 5, 1),
    (lambda x: torch.cumsum(x, dim=1), 4, 6, 5),
    (lambda x: x.cumsum(0), 1, 4, 30),
])
def test_the_forms_capture_records_are_matched(call, outer, r, inner):
    x = torch.randn(4, 6, 5)
    recorder = Recorder()
    with recorder:
        call(x)
    [c] = recorder.calls
    assert f"aten::{c.func._opname}.{c.func._overloadname}" == OP
    facts = cumsum.match(make_task(OP, c.args))
    assert not isinstance(facts, str) and (facts["outer"], facts["r"], facts["inner"]) == (outer, r, inner)


def test_dtype_is_refused_unless_it_is_the_inputs():
    task = make_task(OP, [tensor([4, 5]), 1])
    task.args.append({"kwargs": {"dtype": "torch.float64"}})  # as capture records x.cumsum(1, dtype=torch.float64)
    why = cumsum.match(task)
    assert isinstance(why, str) and "dtype=torch.float64" in why
    task.args[-1] = {"kwargs": {"dtype": "torch.float32"}}
    assert not isinstance(cumsum.match(task), str)


@pytest.mark.parametrize("args, reason", [
    ([tensor([4, 5], "torch.float64"), 1], "on torch.float64"),
    ([tensor([6, 4], stride=[1, 6]), 1], "non-contiguous"),
    ([tensor([0, 4]), 1], "empty"),
])
def test_refusals_say_why(args, reason):
    why = cumsum.match(make_task(OP, args))
    assert isinstance(why, str) and reason in why, why


def test_accumulates_wider_than_the_input():
    assert facts_of([tensor([4, 5]), 1])["acc"] == "float64"
    assert facts_of([tensor([4, 5], "torch.bfloat16"), 1])["acc"] == "float32"
    assert "ACC_FP64 = False" in cumsum.render(facts_of([tensor([4, 5], "torch.float16"), 1]), "triton",
                                               {"variant": "row_scan", "rows_per_program": 1, "num_warps": 4})


# ---------------------------------------------------------------- starting rules

def start_of(args, backend="triton"):
    facts = facts_of(args)
    point = cumsum.start(facts, backend, HW)
    assert cumsum.space(facts, backend, HW).contains(point), point
    return point


def test_start_rules_follow_the_shape():
    # a few very long rows (a sequence-length prefix sum): split across programs
    assert start_of([tensor([4, 1 << 20]), 1])["variant"] == "split_scan"
    # many rows of 1000 (a mask's positions): pack rows, keeping four programs an SM
    many = start_of([tensor([8192, 1000]), -1])
    assert many == {"variant": "row_scan", "rows_per_program": 2, "num_warps": 4}
    assert start_of([tensor([100, 1000]), -1])["rows_per_program"] == 1  # too few to pack
    # long rows, plenty of them: a row per program with a carry
    assert start_of([tensor([1024, 20000]), 1])["variant"] == "blocked_scan"
    # the first or a middle dim: columns
    assert start_of([tensor([64, 512, 256]), 1])["variant"] == "columns"


def test_cpu_start_rules():
    assert start_of([tensor([2, 1 << 20]), 1], "cpu") == {"variant": "split_row", "parts": 64}
    assert start_of([tensor([4096, 1000]), 1], "cpu") == {"variant": "rows", "schedule": "static"}
    assert start_of([tensor([8, 300, 7]), 1], "cpu")["variant"] == "columns"


def test_no_cuda_kernels_yet():
    assert cumsum.space(facts_of([tensor([4, 5]), 1]), "cuda", HW) is None


# ---------------------------------------------------------------- the proposer

@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_the_proposer_starts_at_the_rule_and_never_repeats(backend):
    task = make_task(OP, [tensor([6, 20000]), 1])
    facts = facts_of(task.args)
    space = cumsum.space(facts, backend, HW)
    tried = family_check.proposal_chain(task, backend, steps=30, seed=3)
    assert tried[0].params == cumsum.start(facts, backend, HW) and tried[0].rationale.startswith("starting point: ")
    assert len({p.source for p in tried}) == len(tried)
    assert all(space.contains(p.params) for p in tried)
    assert {p.params["variant"] for p in tried} == set(space.variants)  # every variant reached


def test_moves_are_explained():
    for name, old, new in (("variant", "blocked_scan", "split_scan"), ("block_n", 1024, 512),
                           ("rows_per_program", 2, 4), ("num_warps", 4, 8), ("parts", 16, 4)):
        assert cumsum.explain(name, old, new) != "try a neighbouring value", name
