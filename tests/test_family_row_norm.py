"""The row-norm families (layer norm and RMS norm, propose/families/row_norm/): what they take and
refuse and why, the start rules on realistic shapes, and the proposer end to end. Nothing here
builds a kernel: the sweep (test_sweep.py, on the cases of sweep_cases.py) checks them against
the ATen op on every backend."""

from __future__ import annotations

import random

import family_check
import pytest
import torch
from family_check import family_for, make_task, tensor

from kernforge.backends.scan import scan_source
from kernforge.propose.builtin import BuiltinProposer, Hardware
from kernforge.propose.families import row_norm
from kernforge.records.task import KernelTask

pytestmark = pytest.mark.unit

LN, RMS = row_norm.OPS["layer"], row_norm.OPS["rms"]
F32, BF16, F16 = "torch.float32", "torch.bfloat16", "torch.float16"
HW = Hardware()


def ln_args(shape, dtype=F32, affine=True, normalized=None, aux_dtype=None):
    cols = normalized or shape[-1:]
    aux = aux_dtype or dtype
    return [tensor(shape, dtype), cols, tensor(cols, aux) if affine else None,
            tensor(cols, aux) if affine else None, 1e-5]


def rms_args(shape, dtype=F32, affine=True, eps=None, aux_dtype=None):
    return [tensor(shape, dtype), shape[-1:], tensor(shape[-1:], aux_dtype or dtype) if affine else None, eps]


# Small odd shapes: rows and columns not multiples of any block or pack.
CASES = [
    ("ln-affine", LN, lambda dt: ln_args([5, 3, 37], dt, normalized=[3, 37])),
    ("ln-plain", LN, lambda dt: ln_args([7, 300], dt, affine=False)),
    ("rms-affine", RMS, lambda dt: rms_args([7, 300], dt, eps=1e-6)),
    ("rms-default-eps", RMS, lambda dt: rms_args([3, 2, 37], dt, affine=False)),
]


def facts_of(op, args):
    return family_for(make_task(op, args))


def fake_task(op, args, outputs):
    return KernelTask(task_id="t0", op=op, signature="s", args=args, outputs=outputs, samples=[], share=0.5,
                      gain_if_2x=1.33, time_us=10.0, device="cuda")


# ---------------------------------------------------------------- what is supported

@pytest.mark.parametrize("name, op, make", CASES)
@pytest.mark.parametrize("backend", ["cpu", "triton", "cuda"])
def test_supported_cases_match(name, op, make, backend):
    assert BuiltinProposer().why_unsupported(make_task(op, make(F32)), backend) is None


def test_each_op_goes_to_its_family():
    names = {op: facts_of(op, make(F32))[0].name for _, op, make in CASES}
    assert names == {LN: "layer_norm", RMS: "rms_norm"}


@pytest.mark.parametrize("op, args, words", [
    (LN, [tensor([4, 8], F32, [1, 4]), [8], None, None, 1e-5], "layer norm on a non-contiguous input"),
    (LN, ln_args([4, 8], "torch.float64"), "layer norm on torch.float64"),
    (RMS, [tensor([4, 8]), [4], None, None], "normalized_shape is not the input's trailing dims"),
    (LN, ln_args([4, 8], BF16, aux_dtype=F16), "weight of dtype torch.float16 beside a torch.bfloat16 input"),
    (RMS, [tensor([4, 8]), [8], tensor([4]), None], "rms norm with a weight not of normalized_shape"),
    (LN, [tensor([0, 8]), [8], None, None, 1e-5], "layer norm on an empty tensor"),
])
def test_unsupported_cases_say_why(op, args, words):
    task = fake_task(op, args, [tensor([1])])
    for backend in ("cpu", "triton", "cuda"):
        reason = BuiltinProposer().why_unsupported(task, backend)
        assert reason is not None and words in reason, reason


def test_other_ops_are_refused_with_the_op_named():
    task = fake_task("aten::bmm.default", [tensor([2, 3, 4]), tensor([2, 4, 5])], [tensor([2, 3, 5])])
    for family in row_norm.FAMILIES:
        assert family.match(task) == "no built-in template for aten::bmm.default"


def test_no_metal_template():
    task = make_task(LN, ln_args([4, 8]))
    assert BuiltinProposer().why_unsupported(task, "metal") == "no metal template for layer_norm"


def test_statistics_follow_the_task_outputs():
    # CPU layer norm keeps bf16 statistics, CUDA's are fp32: the kernel allocates what the task lists
    task = make_task(LN, ln_args([4, 64], BF16))
    family, facts = family_for(task)
    assert [o["dtype"] for o in facts["outputs"]] == ["bfloat16"] * 3 and not facts["stats_f32"]
    cuda_like = fake_task(LN, task.args, [task.outputs[0]] + [{**o, "dtype": F32} for o in task.outputs[1:]])
    cuda_facts = family.match(cuda_like)
    assert cuda_facts["stats_f32"]
    triton = family.render(cuda_facts, "triton", family.start(cuda_facts, "triton", HW))
    assert "STATS_F32 = True" in triton and "STATS_SHAPE = (4, 1)" in triton
    assert "#define STATS_F32 1" in family.render(cuda_facts, "cuda", family.start(cuda_facts, "cuda", HW))


def test_rms_default_eps_is_float32_epsilon():
    _, facts = facts_of(RMS, rms_args([3, 8], BF16, eps=None))
    assert facts["eps"] == torch.finfo(torch.float32).eps


# ---------------------------------------------------------------- spaces and starting points

def sampled_points(family, facts, backend, count=40):
    return family.space(facts, backend, HW).sample(random.Random(0), count)


@pytest.mark.parametrize("name, op, make", CASES)
@pytest.mark.parametrize("backend", ["cpu", "triton", "cuda"])
def test_points_render_distinct_sources_and_the_start_is_one(name, op, make, backend):
    family, facts = facts_of(op, make(BF16))
    space = family.space(facts, backend, HW)
    assert space.contains(family.start(facts, backend, HW))
    points = sampled_points(family, facts, backend)
    sources = {family.render(facts, backend, p) for p in points}
    assert len(sources) == len(points) > 1


def test_variants_follow_the_row_length():
    def variants(cols):
        _, facts = facts_of(LN, ln_args([4, cols], BF16))
        return set(row_norm.space(facts, "triton", HW).variants)

    assert variants(37) == {"single_tile"}  # no block of 512 is shorter than two rows of 37
    assert variants(300) == {"single_tile", "loop"}
    assert variants(20000) == {"loop"}  # a whole row of 32K values spills
    _, facts = facts_of(RMS, rms_args([4, 300], BF16))
    assert row_norm.space(facts, "cuda", HW).variants[""].param("vec").values == (1, 2, 4)  # 300 % 8 != 0


def h200_facts(op, rows, cols, dtype=BF16):
    """A task of `rows` rows (facts only: no tensor of that size is made)."""
    _, facts = facts_of(op, (ln_args if op == LN else rms_args)([1, cols], dtype))
    return {**facts, "rows": rows}


def test_triton_start_rules():
    for op in (LN, RMS):
        # the layer norm's start took 38.4 us in the H200 search (bench/results/h200/search/part3)
        # against a 31.6 us floor
        assert row_norm.start(h200_facts(op, 8192, 4096), "triton", HW) == {
            "variant": "single_tile", "rows_per_program": 1, "persistent": False, "num_warps": 4}
    # short rows share a program while two waves remain: 16 rows of 128 when rows abound...
    many = row_norm.start(h200_facts(LN, 1 << 20, 100), "triton", HW)
    assert many == {"variant": "single_tile", "rows_per_program": 16, "persistent": False, "num_warps": 4}
    # ...but fewer on a small task, and fewer still on a GPU of more SMs
    few = row_norm.start(h200_facts(LN, 2000, 100), "triton", HW)
    assert few["rows_per_program"] == 4
    assert row_norm.start(h200_facts(LN, 2000, 100), "triton", Hardware(sms=264))["rows_per_program"] == 2
    # a row of 32K values does not fit one program: blocks of 4096
    assert row_norm.start(h200_facts(RMS, 64, 32768), "triton", HW)["variant"] == "loop"


def test_cuda_start_rules():
    # (8192, 4096) bf16: packs of 8, 128 threads a row (four packs each), the row in registers
    start = row_norm.start(h200_facts(RMS, 8192, 4096), "cuda", HW)
    assert start == {"threads_per_row": 128, "rows_per_block": 2, "vec": 8, "cache_row": True}
    # float32 rows of 300: packs of 4 (300 % 8 != 0 needs no narrower), a warp a row, 8 rows a block
    assert row_norm.start(h200_facts(LN, 1 << 16, 300, F32), "cuda", HW) == {
        "threads_per_row": 32, "rows_per_block": 8, "vec": 4, "cache_row": True}
    # a row of 1M values cannot be cached: 1024 threads stream it twice
    long_row = row_norm.start(h200_facts(LN, 16, 1 << 20), "cuda", HW)
    assert long_row["threads_per_row"] == 1024 and not long_row["cache_row"]


def test_float32_sources_pass_the_scan():
    """The scan reads a half type anywhere in a float32 op's text as lower precision."""
    for _, op, make in CASES:
        family, facts = facts_of(op, make(F32))
        for backend, language in (("cpu", "c"), ("triton", "triton"), ("cuda", "cuda")):
            for p in sampled_points(family, facts, backend, count=4):  # the C scan runs gcc
                findings = scan_source(family.render(facts, backend, p), language, "float32")
                assert not findings, (backend, p, [str(f) for f in findings])


# ---------------------------------------------------------------- float32 weights beside 16-bit rows

@pytest.mark.parametrize("op, args", [
    (LN, ln_args([6, 77], BF16, aux_dtype=F32)), (RMS, rms_args([6, 77], F16, eps=1e-5, aux_dtype=F32)),
], ids=["layer-bf16-f32-affine", "rms-f16-f32-weight"])
def test_float32_weights_beside_half_inputs_are_taken(op, args):
    """On every backend, the kernels reading them as float32 (sweep_cases.py holds such cases)."""
    family, facts = facts_of(op, args)
    assert facts["w_f32"] and facts["dtype"] != "float32"
    assert (facts["b_f32"] if op == LN else not facts["has_bias"])
    for backend in ("cpu", "triton", "cuda"):
        assert BuiltinProposer().why_unsupported(make_task(op, args), backend) is None


# ---------------------------------------------------------------- the proposer end to end

@pytest.mark.parametrize("op, args", [
    (LN, ln_args([5, 3, 37], BF16, normalized=[3, 37])), (RMS, rms_args([7, 300], BF16)),
], ids=["layer", "rms"])
@pytest.mark.parametrize("backend", ["cpu", "triton", "cuda"])
def test_proposals_start_at_the_start_rule_and_never_repeat(op, args, backend):
    task = make_task(op, args)
    family, facts = family_for(task)
    space = family.space(facts, backend, HW)
    tried = family_check.proposal_chain(task, backend, steps=40, seed=2)
    assert tried[0].params == family.start(facts, backend, HW)
    assert tried[0].rationale.startswith("starting point: ")
    assert len({p.source for p in tried}) == len(tried)  # never the same kernel twice
    assert all(space.contains(p.params) for p in tried)
    assert len(tried) > 3


def test_moves_are_explained():
    for name, old, new in (("variant", "single_tile", "loop"), ("persistent", False, True),
                           ("stats", "welford", "one_pass_double"), ("cache_row", True, False),
                           ("block_n", 512, 1024), ("threads_per_row", 64, 32), ("vec", 4, 8)):
        assert row_norm.explain(name, old, new) != "try a neighbouring value", name
