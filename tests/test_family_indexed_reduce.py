"""The indexed-reduce family: max.dim / min.dim (values and indices) and argmax / argmin.

What it takes (the forms capture records) and why not, its starting rules on realistic
shapes, and the proposer end to end. Nothing here builds a kernel: the sweep (test_sweep.py, on
the cases of sweep_cases.py) checks every op's kernels on every backend, eager's semantics on
ties, NaN and infinities included (family_check's ties_nan input set, along the reduced dim);
test_family_kernels.py that a kernel breaking the tie rule fails and that a zero keeps its sign.
"""

from __future__ import annotations

import family_check
import pytest
import torch
from family_check import make_task, tensor

from kernforge.capture.recorder import Recorder
from kernforge.propose.builtin import Hardware
from kernforge.propose.families import indexed_reduce as ir

pytestmark = pytest.mark.unit

MAX, MIN, ARGMAX, ARGMIN = "aten::max.dim", "aten::min.dim", "aten::argmax.default", "aten::argmin.default"
HW = Hardware()


# ---------------------------------------------------------------- what is supported

def recorded(call) -> list[tuple[str, list]]:
    """(op, args) of each ATen call `call` makes, as capture records them."""
    recorder = Recorder()
    with recorder:
        call()
    return [(f"aten::{c.func._opname}.{c.func._overloadname}", c.args) for c in recorder.calls]


@pytest.mark.parametrize("call, op, outer, r, inner", [
    (lambda x: torch.max(x, dim=1), MAX, 4, 6, 5),
    (lambda x: x.min(-1, keepdim=True), MIN, 24, 5, 1),
    (lambda x: x.argmax(-1), ARGMAX, 24, 5, 1),
    (lambda x: x.argmax(), ARGMAX, 1, 120, 1),  # dim None: the flattened tensor
    (lambda x: x.argmin(keepdim=True), ARGMIN, 1, 120, 1),
    (lambda x: torch.argmin(x, dim=0, keepdim=True), ARGMIN, 1, 4, 30),
])
def test_the_forms_capture_records_are_matched(call, op, outer, r, inner):
    x = torch.randn(4, 6, 5)
    [(recorded_op, args)] = recorded(lambda: call(x))
    assert recorded_op == op
    facts = ir.match(make_task(op, args))
    assert not isinstance(facts, str), facts
    assert (facts["outer"], facts["r"], facts["inner"]) == (outer, r, inner)
    assert facts["values"] == (op in (MAX, MIN)) and facts["is_min"] == (op in (MIN, ARGMIN))


@pytest.mark.parametrize("op, args, reason", [
    ("aten::max.default", [tensor([4, 5])], "no built-in template for aten::max.default"),
    (MAX, [tensor([4, 5], "torch.float64"), 1], "max.dim on torch.float64"),
    (ARGMAX, [tensor([4, 5], "torch.int32"), 1], "argmax.default on torch.int32"),
    (MIN, [tensor([6, 4], stride=[1, 6]), 0], "non-contiguous"),
    (ARGMIN, [tensor([0, 4]), 1], "empty"),
    (ARGMAX, [tensor([])], "0-dim"),
])
def test_refusals_say_why(op, args, reason):
    task = make_task(op, args) if "int32" not in reason else _task_without_eager(op, args)
    why = ir.match(task)
    assert isinstance(why, str) and reason in why, why


def _task_without_eager(op, args):
    task = make_task(op, [tensor([4, 5]), 1])
    task.args = args
    return task


def test_a_size_one_dim_with_any_stride_is_still_contiguous():
    facts = ir.match(make_task(MAX, [tensor([4, 1, 5], stride=[5, 1, 1]), -1]))
    assert not isinstance(facts, str) and (facts["outer"], facts["r"]) == (4, 5)


# ---------------------------------------------------------------- starting rules

def start_of(op, args, backend="triton"):
    task = make_task(op, args)
    facts = ir.match(task)
    point = ir.start(facts, backend, HW)
    assert ir.space(facts, backend, HW).contains(point), point
    return point


def test_start_rules_follow_the_shape():
    # a language model's greedy decode: 32 rows of a 50257 vocabulary, too few to fill 132 SMs
    decode = start_of(ARGMAX, [tensor([32, 50257]), -1])
    assert decode["variant"] == "split_row" and 32 * decode["splits"] >= 4 * HW.sms
    # argmax over a whole 8M tensor: one row, split as far as it goes
    assert start_of(ARGMAX, [tensor([2048, 4096])]) == {"variant": "split_row", "block_n": 4096, "splits": 256,
                                                        "num_warps": 8}
    # a classifier's top-1 over 1000 classes for a large batch: a row a program
    top1 = start_of(MAX, [tensor([4096, 1000]), 1])
    assert top1["variant"] == "packed_rows" and top1["rows_per_program"] == 4
    # many short rows (a max over 16 heads) pack rows, keeping four programs an SM
    heads = start_of(MAX, [tensor([65536, 16]), -1])
    assert heads["variant"] == "packed_rows" and 65536 // heads["rows_per_program"] >= 4 * HW.sms
    # long rows, plenty of them: one row per program, looping
    assert start_of(MIN, [tensor([1024, 20000]), 1])["variant"] == "row_loop"
    # a middle dim: columns; narrower column blocks when there are few
    cols = start_of(MAX, [tensor([512, 1000, 128]), 1])
    assert cols["variant"] == "columns" and cols["block_c"] == 64
    assert start_of(MAX, [tensor([2, 1000, 128]), 1])["block_c"] == 32


def test_cpu_start_rules():
    assert start_of(ARGMAX, [tensor([2048, 4096])], "cpu") == {"variant": "split_row", "parts": 64}
    assert start_of(MAX, [tensor([4096, 1000]), 1], "cpu") == {"variant": "rows", "schedule": "static"}
    assert start_of(MIN, [tensor([8, 300, 7]), 1], "cpu")["variant"] == "columns"


def test_the_spaces_offer_only_what_fits_the_shape():
    short = ir.space(ir.match(make_task(MAX, [tensor([100, 37]), 1])), "triton", HW)
    assert set(short.variants) == {"packed_rows"}  # no loop or split for a row of 37
    long = ir.space(ir.match(make_task(MAX, [tensor([3, 100000]), 1])), "triton", HW)
    assert set(long.variants) == {"row_loop", "split_row"}  # a whole row is more than one tile
    assert ir.space(ir.match(make_task(MAX, [tensor([3, 37]), 1])), "cuda", HW) is None


# ---------------------------------------------------------------- the proposer

@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_the_proposer_starts_at_the_rule_and_never_repeats(backend):
    task = make_task(MIN, [tensor([6, 5000]), 1])
    facts = ir.match(task)
    space = ir.space(facts, backend, HW)
    tried = family_check.proposal_chain(task, backend, steps=30, seed=3)
    assert tried[0].params == ir.start(facts, backend, HW) and tried[0].rationale.startswith("starting point: ")
    assert len({p.source for p in tried}) == len(tried)
    assert all(space.contains(p.params) for p in tried)
    assert len(tried) >= min(31, space.size()) - 1
    assert {p.params["variant"] for p in tried} == set(space.variants)  # every variant reached


def test_moves_are_explained():
    for name, old, new in (("variant", "row_loop", "split_row"), ("splits", 4, 8), ("block_n", 1024, 512),
                           ("rows_per_program", 2, 4), ("num_warps", 4, 8), ("parts", 16, 4)):
        assert ir.explain(name, old, new) != "try a neighbouring value", name
