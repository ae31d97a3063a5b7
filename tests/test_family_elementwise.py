"""The element-wise family: which ops and cases it takes, its spaces and starting rules, and the
proposer end to end. Nothing here builds a kernel: the sweep (test_sweep.py, on the cases of
sweep_cases.py: each op's snippet, each kind of operand) checks them on every backend, and
test_family_kernels.py the Triton kernels' 64-bit offsets, which only tensors past 2^31
elements take by themselves.

gelu's `approximate` and add's `alpha` are keyword-only: the tasks carry them as capture does, in
a last {"kwargs": ...} argument.
"""

from __future__ import annotations

import random
from typing import Any

import family_check
import pytest
from family_check import channels_last, make_task, tensor

from kernforge.backends.scan import scan_source
from kernforge.propose.builtin import BuiltinProposer, Hardware
from kernforge.propose.families import elementwise as ew
from kernforge.records.task import KernelTask

pytestmark = pytest.mark.unit

BACKENDS = ("cpu", "triton", "cuda")
LANGUAGE = {"cpu": "c", "triton": "triton", "cuda": "cuda"}
HW = Hardware()


# ---------------------------------------------------------------- the cases

def t(shape, dtype="float32", stride=None, positive=False):
    return tensor(list(shape), f"torch.{dtype}", stride, positive)


def kw(**kwargs):
    return {"kwargs": kwargs}


SHAPE = (5, 37)  # odd rows and columns: every block has a tail
NCHW = (2, 6, 5, 7)
CL_STRIDE = channels_last(list(NCHW))

# (id, op, args as a function of dtype)
CASES = [
    ("relu", "aten::relu.default", lambda d: [t(SHAPE, d)]),
    ("silu", "aten::silu.default", lambda d: [t(SHAPE, d)]),
    ("gelu", "aten::gelu.default", lambda d: [t(SHAPE, d)]),
    ("gelu_tanh", "aten::gelu.default", lambda d: [t(SHAPE, d), kw(approximate="tanh")]),
    ("sigmoid", "aten::sigmoid.default", lambda d: [t(SHAPE, d)]),
    ("tanh", "aten::tanh.default", lambda d: [t(SHAPE, d)]),
    ("exp", "aten::exp.default", lambda d: [t(SHAPE, d)]),
    ("log", "aten::log.default", lambda d: [t(SHAPE, d, positive=True)]),
    ("neg", "aten::neg.default", lambda d: [t(SHAPE, d)]),
    ("abs", "aten::abs.default", lambda d: [t(SHAPE, d)]),
    ("sqrt", "aten::sqrt.default", lambda d: [t(SHAPE, d, positive=True)]),
    ("rsqrt", "aten::rsqrt.default", lambda d: [t(SHAPE, d, positive=True)]),
    ("reciprocal", "aten::reciprocal.default", lambda d: [t(SHAPE, d)]),
    ("erf", "aten::erf.default", lambda d: [t(SHAPE, d)]),
    ("hardswish", "aten::hardswish.default", lambda d: [t(SHAPE, d)]),
    ("hardsigmoid", "aten::hardsigmoid.default", lambda d: [t(SHAPE, d)]),
    ("leaky_relu", "aten::leaky_relu.default", lambda d: [t(SHAPE, d), 0.2]),
    ("elu", "aten::elu.default", lambda d: [t(SHAPE, d), 0.5, 1.5, 0.75]),
    ("selu", "aten::selu.default", lambda d: [t(SHAPE, d)]),
    ("celu", "aten::celu.default", lambda d: [t(SHAPE, d), 0.7]),
    ("softplus", "aten::softplus.default", lambda d: [t(SHAPE, d), 2.0, 10.0]),
    ("softplus_defaults", "aten::softplus.default", lambda d: [t(SHAPE, d)]),
    ("mish", "aten::mish.default", lambda d: [t(SHAPE, d)]),
    ("hardtanh", "aten::hardtanh.default", lambda d: [t(SHAPE, d), -0.5, 2.0]),
    ("clamp", "aten::clamp.default", lambda d: [t(SHAPE, d), -0.3, 0.8]),
    ("clamp_lo_only", "aten::clamp.default", lambda d: [t(SHAPE, d), 0.1]),
    ("clamp_crossed", "aten::clamp.default", lambda d: [t(SHAPE, d), 0.5, -0.5]),  # min > max: max
    ("clamp_max", "aten::clamp_max.default", lambda d: [t(SHAPE, d), 0.25]),
    ("threshold", "aten::threshold.default", lambda d: [t(SHAPE, d), 0.1, -2.0]),
    ("hardshrink", "aten::hardshrink.default", lambda d: [t(SHAPE, d), 0.3]),
    ("softshrink", "aten::softshrink.default", lambda d: [t(SHAPE, d), 0.3]),
    ("pow2", "aten::pow.Tensor_Scalar", lambda d: [t(SHAPE, d), 2]),
    ("pow_half", "aten::pow.Tensor_Scalar", lambda d: [t(SHAPE, d, positive=True), 0.5]),
    ("pow_minus1", "aten::pow.Tensor_Scalar", lambda d: [t(SHAPE, d), -1]),
    ("pow5", "aten::pow.Tensor_Scalar", lambda d: [t(SHAPE, d), 5]),  # fp16 overflows past 9.2
    ("pow2_5", "aten::pow.Tensor_Scalar", lambda d: [t(SHAPE, d, positive=True), 2.5]),
    ("silu_channels_last", "aten::silu.default", lambda d: [t(NCHW, d, CL_STRIDE)]),
    # a strided view (every other column): the output is contiguous, the input read at a stride
    ("relu_strided", "aten::relu.default", lambda d: [t((6, 40), d, [80, 2])]),
    ("add", "aten::add.Tensor", lambda d: [t(SHAPE, d), t(SHAPE, d)]),
    ("sub_alpha", "aten::sub.Tensor", lambda d: [t(SHAPE, d), t(SHAPE, d), kw(alpha=0.5)]),
    ("add_rows", "aten::add.Tensor", lambda d: [t((6, 37), d), t((37,), d), kw(alpha=2)]),
    ("add_outer", "aten::add.Tensor", lambda d: [t((6, 1), d), t((1, 40), d)]),
    ("add_rows_wide", "aten::add.Tensor", lambda d: [t((3, 300), d), t((300,), d)]),  # 2 column tiles
    ("mul_cols", "aten::mul.Tensor", lambda d: [t((6, 37), d), t((6, 1), d)]),
    ("mul_nchw", "aten::mul.Tensor", lambda d: [t(NCHW, d), t((6, 1, 1), d)]),
    ("mul_nchw_channels_last", "aten::mul.Tensor", lambda d: [t(NCHW, d, CL_STRIDE), t((6, 1, 1), d)]),
    ("add_channels_last", "aten::add.Tensor", lambda d: [t(NCHW, d, CL_STRIDE), t(NCHW, d, CL_STRIDE)]),
    ("add_transposed", "aten::add.Tensor", lambda d: [t((6, 37), d), t((6, 37), d, [1, 6])]),
    ("div_0dim", "aten::div.Tensor", lambda d: [t(SHAPE, d), t((), "float64", positive=True)]),
    ("mul_0dim_self", "aten::mul.Tensor", lambda d: [t((), "float32"), t(SHAPE, d)]),
    ("mul_0dim_int", "aten::mul.Tensor", lambda d: [t(SHAPE, d), t((), "int64")]),
    ("mul_number", "aten::mul.Tensor", lambda d: [t(SHAPE, d), 2.5]),
    ("add_number", "aten::add.Tensor", lambda d: [t(SHAPE, d), 1]),
    ("maximum_rows", "aten::maximum.default", lambda d: [t((6, 37), d), t((37,), d)]),
    ("minimum", "aten::minimum.default", lambda d: [t(SHAPE, d), t(SHAPE, d)]),
    ("add_scalar", "aten::add.Scalar", lambda d: [t(SHAPE, d), 3.0, 2]),
    ("sub_scalar", "aten::sub.Scalar", lambda d: [t(SHAPE, d), 0.25]),
    ("mul_scalar", "aten::mul.Scalar", lambda d: [t(SHAPE, d), -0.5]),
    ("div_scalar", "aten::div.Scalar", lambda d: [t(SHAPE, d), 3]),
    ("rsub_scalar", "aten::rsub.Scalar", lambda d: [t(SHAPE, d), 2.0]),
    ("mul_0dim_both", "aten::mul.Tensor", lambda d: [t((), d), t((), d)]),
]
CASE_IDS = [c[0] for c in CASES]


def case_task(case_id: str, dtype: str) -> KernelTask:
    _, op, args = CASES[CASE_IDS.index(case_id)]
    return make_task(op, args(dtype))


def facts_of(case_id: str, dtype: str = "float32") -> dict[str, Any]:
    return ew.match(case_task(case_id, dtype))


def space_of(facts: dict[str, Any], backend: str):
    return ew.space(facts, backend, HW)


def all_points(facts: dict[str, Any], backend: str) -> list[dict[str, Any]]:
    """Every buildable point (the spaces are small: a few hundred points at most)."""
    return space_of(facts, backend).sample(random.Random(0), 10_000)


# ---------------------------------------------------------------- what is supported

@pytest.mark.parametrize("case_id", CASE_IDS)
def test_every_case_is_supported_on_every_backend(case_id):
    task = case_task(case_id, "bfloat16")
    for backend in BACKENDS:
        assert BuiltinProposer().why_unsupported(task, backend) is None, backend
        assert BuiltinProposer()._family_for(task)[0].name == "elementwise"


def raw_task(op: str, args: list[Any], out: dict[str, Any]) -> KernelTask:
    return KernelTask(task_id="t0", op=op, signature="s", args=args, outputs=[out], samples=[], share=0.5,
                      gain_if_2x=1.3, time_us=1.0, device="cuda")


def test_clamp_bounds_and_selu_constants_are_read_as_aten_passes_them():
    def facts(op, args):
        return ew.match(raw_task(op, [t(SHAPE), *args], t(SHAPE)))

    assert (facts("aten::clamp.default", [None, 0.5])["expr"], facts("aten::clamp.default", [None, 0.5])["consts"]) \
        == ("clamp_max", {"hi": 0.5})
    assert facts("aten::hardtanh.default", [])["consts"] == {"lo": -1.0, "hi": 1.0}  # its defaults
    assert facts("aten::clamp_min.default", [2])["consts"] == {"lo": 2.0}
    selu = facts("aten::selu.default", [])
    assert selu["expr"] == "elu" and selu["consts"]["neg_scale"] == pytest.approx(1.6732632423543772 * 1.0507009873554805)
    assert "neither bound" in ew.match(raw_task("aten::clamp.default", [t(SHAPE), None, None], t(SHAPE)))
    assert "tensor bound" in ew.match(raw_task("aten::clamp.default", [t(SHAPE), t(SHAPE)], t(SHAPE)))


@pytest.mark.parametrize("op, args, words", [
    ("aten::add_.Tensor", [t(SHAPE), t(SHAPE)], "in-place aten::add_.Tensor writes into its input"),
    ("aten::relu_.default", [t(SHAPE)], "in-place aten::relu_.default"),
    ("aten::div.Tensor_mode", [t(SHAPE), t(SHAPE), kw(rounding_mode="floor")], "rounding_mode"),
    ("aten::pow.Tensor_Tensor", [t(SHAPE), t(SHAPE)], "only the Tensor_Scalar overload(s) of pow"),
    ("aten::add.Tensor", [t(SHAPE, "bfloat16"), t(SHAPE, "float32")], "type promotion"),
    ("aten::mul.Tensor", [t(SHAPE, "bfloat16"), t((1,), "float32")], "type promotion"),
    ("aten::relu.default", [t(SHAPE, "int64")], "torch.int64 output"),
    ("aten::sigmoid.default", [t(SHAPE, "float64")], "torch.float64 output"),
    ("aten::relu.default", [t((0, 5))], "empty output"),
    ("aten::bmm.default", [t((2, 3, 4)), t((2, 4, 5))], "no built-in template for aten::bmm.default"),
])
def test_unsupported_cases_say_why(op, args, words):
    reason = ew.match(make_task(op, args))
    assert isinstance(reason, str) and words in reason, reason


def test_out_variants_and_gapped_outputs_are_refused():
    assert "out= variants" in ew.match(raw_task("aten::add.out", [t(SHAPE), t(SHAPE)], t(SHAPE)))
    gapped = t((4, 5), stride=[10, 1])
    assert "gaps" in ew.match(raw_task("aten::relu.default", [gapped], gapped))


def test_dims_are_coalesced_in_the_outputs_memory_order():
    same = facts_of("add")
    assert same["sizes"] == [185] and [o["kind"] for o in same["operands"]] == ["same", "same"]
    nchw = facts_of("mul_nchw")  # (C,1,1): [N, C, H*W], the channel operand steps along C only
    assert nchw["sizes"] == [2, 6, 35] and nchw["operands"][1]["strides"] == [0, 1, 0]
    cl = facts_of("mul_nchw_channels_last")  # channels-last output: [N*H*W, C], walked as stored
    assert cl["sizes"] == [70, 6] and cl["operands"][1]["strides"] == [0, 1]
    assert cl["out_stride"] == CL_STRIDE
    rows = facts_of("add_rows")
    assert rows["sizes"] == [6, 37] and rows["operands"][1]["strides"] == [0, 1]
    assert rows["consts"] == {"alpha": 2.0}
    assert [o["kind"] for o in facts_of("div_0dim")["operands"]] == ["same", "scalar"]
    assert [o["kind"] for o in facts_of("mul_number")["operands"]] == ["same", "const"]
    assert facts_of("gelu_tanh")["expr"] == "gelu_tanh" and facts_of("gelu")["expr"] == "gelu"


def test_the_op_and_its_numbers_are_the_snippet_and_the_layout_the_constants():
    facts = facts_of("add_rows")  # alpha 2 baked into op()
    triton = ew.render(facts, "triton", ew.start(facts, "triton", HW))
    assert "def op(a, b):\n    return a + 2.0 * b\n" in triton
    assert "SIZES = (1, 1, 6, 37)" in triton and "B_KIND = 'strided'" in triton
    assert "B_STRIDES = (0, 0, 0, 1)" in triton
    c = ew.render(facts, "cpu", ew.start(facts, "cpu", HW))
    assert "static inline float op(float a, float b) { return a + 2.0f * b; }" in c
    assert "#define B_STRIDES 0, 1" in c and "#define B_KIND STRIDED" in c
    number = facts_of("mul_number")  # a number operand is bound inside op(); B reads nothing
    assert "b = 2.5  # the op's number operand" in ew.render(number, "triton", ew.start(number, "triton", HW))
    cuda = ew.render(number, "cuda", ew.start(number, "cuda", HW))
    assert "b = 2.5f;" in cuda and "#define B_KIND NONE" in cuda
    # every op shares the rest of the file: two ops' renders differ only in the constants block
    other = facts_of("add")
    tail = lambda s: s.split("kf-constants: end")[1]  # noqa: E731
    assert tail(ew.render(other, "cpu", {"variant": "flat", "inner_loop": "simd"})) == \
        tail(ew.render(facts, "cpu", {"variant": "flat", "inner_loop": "simd"}))


def test_launchers_are_built_for_one_layout():
    facts = facts_of("relu_strided")
    source = ew.render(facts, "triton", ew.start(facts, "triton", HW))
    # kf_forward's _expect raises instead of reading at the wrong strides
    assert "A_SHAPE = (6, 40)" in source and "A_STRIDE = (80, 2)" in source
    c = ew.render(facts, "cpu", ew.start(facts, "cpu", HW))
    assert "#define A_SHAPE 6, 40" in c and "#define A_STRIDE 80, 2" in c  # kf_layout fails the call
    zero_dim = facts_of("div_0dim")
    assert "B_SHAPE = ()" in ew.render(zero_dim, "triton", ew.start(zero_dim, "triton", HW))


def test_large_tensors_index_in_int64():
    big = t((3, 2**30), "bfloat16")
    facts = ew.match(raw_task("aten::silu.default", [big], big))
    assert facts["int64"]
    assert "INT64 = True" in ew.render(facts, "triton", ew.start(facts, "triton", HW))
    assert "#define INDEX_T int64_t" in ew.render(facts, "cuda", ew.start(facts, "cuda", HW))
    small = t((2**20,), "bfloat16")
    facts = ew.match(raw_task("aten::silu.default", [small], small))
    assert "INT64 = False" in ew.render(facts, "triton", ew.start(facts, "triton", HW))
    assert "#define INDEX_T int32_t" in ew.render(facts, "cuda", ew.start(facts, "cuda", HW))


def _start(task: KernelTask, backend: str, hw: Hardware = HW) -> dict[str, Any]:
    return ew.start(ew.match(task), backend, hw)


def test_triton_starting_point_moves_near_copy_bandwidth_on_large_tensors():
    # 64M bf16 elements: 16 KB tiles (8192 elements, 32 a thread with 8 warps), 8192 programs
    x = t((8192, 8192), "bfloat16")
    assert _start(raw_task("aten::silu.default", [x], x), "triton") == \
        {"variant": "flat", "block": 8192, "num_warps": 8, "programs_per_sm": 0}
    x32 = t((8192, 8192))
    assert _start(raw_task("aten::silu.default", [x32], x32), "triton")["block"] == 4096
    # a small tensor still spreads over the SMs: 2 x 132 programs at least, down to 1024 elements
    small = t((64, 1024), "bfloat16")
    assert _start(raw_task("aten::silu.default", [small], small), "triton")["block"] == 1024
    # ... over the SMs of the machine it runs on: 8 SMs take 32 blocks of 2048
    assert _start(raw_task("aten::silu.default", [small], small), "triton", Hardware(sms=8))["block"] == 2048
    # a row broadcast starts on [rows, cols] tiles, on the CPU on rows
    rows = raw_task("aten::add.Tensor", [t((4096, 4096), "bfloat16"), t((4096,), "bfloat16")],
                    t((4096, 4096), "bfloat16"))
    assert _start(rows, "triton")["variant"] == "tile2d"
    assert _start(rows, "cpu") == {"variant": "rows", "inner_loop": "simd"}
    tiny_rows = raw_task("aten::add.Tensor", [t((4096, 8)), t((8,))], t((4096, 8)))
    assert _start(tiny_rows, "triton")["variant"] == "flat"  # rows of 8: a division per element is cheaper


def test_cuda_starting_point_takes_16_byte_packs_and_fills_the_sms():
    x = t((8192, 8192), "bfloat16")  # 16 KB a block: 256 threads, 4 packs of 8 a thread
    assert _start(raw_task("aten::silu.default", [x], x), "cuda") == {"vec": 8, "threads": 256, "packs": 4}
    x32 = t((8192, 8192))
    assert _start(raw_task("aten::silu.default", [x32], x32), "cuda")["vec"] == 4
    small = t((64, 1024), "bfloat16")  # 65K elements: one pack a thread for 4 blocks per SM or more
    assert _start(raw_task("aten::silu.default", [small], small), "cuda")["packs"] == 1
    tiny = t((3, 5))  # smaller than one block of the fewest threads
    point = _start(raw_task("aten::silu.default", [tiny], tiny), "cuda")
    assert space_of(ew.match(raw_task("aten::silu.default", [tiny], tiny)), "cuda").contains(point)


def test_five_merged_dims_have_no_triton_kernel():
    # broadcast along every other dim: nothing merges, five dims where Triton's kernels take four
    # (the C kernel reads them and the CUDA one builds: a case of sweep_cases.py)
    task = make_task("aten::add.Tensor", [t((2, 3, 4, 5, 6)), t((2, 1, 4, 1, 6))])
    facts = ew.match(task)
    assert len(facts["sizes"]) == 5
    assert space_of(facts, "triton") is None
    assert BuiltinProposer().why_unsupported(task, "triton") == "no triton template for elementwise"
    assert BuiltinProposer().why_unsupported(task, "cuda") is None
    assert BuiltinProposer().why_unsupported(task, "cpu") is None


# ---------------------------------------------------------------- spaces

@pytest.mark.parametrize("case_id", ["silu", "add_rows", "mul_nchw_channels_last", "div_0dim", "mul_0dim_self"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_point_renders_a_distinct_source(case_id, backend):
    facts = facts_of(case_id, "bfloat16")
    points = all_points(facts, backend)
    assert space_of(facts, backend).contains(ew.start(facts, backend, HW))
    assert 2 <= len(points) <= 400
    assert len({ew.render(facts, backend, p) for p in points}) == len(points)


def test_spaces_offer_the_structural_moves():
    rows = facts_of("add_rows")
    assert list(space_of(rows, "triton").variants) == ["flat", "tile2d"]
    assert list(space_of(rows, "cpu").variants) == ["flat", "rows"]
    flat = facts_of("relu")
    assert list(space_of(flat, "triton").variants) == ["flat"]  # one coalesced dim: nothing to tile
    assert space_of(facts_of("silu"), "cpu").variants["flat"].param("math") is not None
    assert space_of(flat, "cpu").variants["flat"].param("math") is None
    assert space_of(flat, "metal") is None
    # a 16-byte pack is 4 fp32 or 8 bf16 elements
    assert space_of(facts_of("silu"), "cuda").variants[""].param("vec").values == (1, 2, 4)
    assert space_of(facts_of("silu", "bfloat16"), "cuda").variants[""].param("vec").values == (1, 2, 4, 8)
    for name, old, new in [("block", 1024, 2048), ("programs_per_sm", 0, 4), ("variant", "flat", "tile2d"),
                           ("inner_loop", "simd", "unroll8"), ("vec", 4, 8), ("packs", 1, 2)]:
        assert ew.explain(name, old, new) != "try a neighbouring value"


def test_blocks_never_exceed_the_tensor_and_threads_hold_at_most_32_values():
    facts = facts_of("add")  # 185 elements: one block of 256 at most
    assert space_of(facts, "triton").variants["flat"].param("block").values == (256,)
    for p in all_points(facts, "triton"):
        assert 1 <= p["block"] // (32 * p["num_warps"]) <= 32
    for p in all_points(facts, "cuda"):
        assert p["threads"] * p["packs"] * p["vec"] <= max(256, 64 * p["vec"])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_sources_name_the_op_and_pass_the_scan(dtype):
    for case_id in CASE_IDS:
        task = case_task(case_id, dtype)
        facts = ew.match(task)
        for backend in BACKENDS:
            source = ew.render(facts, backend, ew.start(facts, backend, HW))
            assert f"kf-op: {task.op}" in source
            assert scan_source(source, LANGUAGE[backend], task.outputs[0]["dtype"]) == [], (case_id, backend)


# ---------------------------------------------------------------- the proposer end to end

@pytest.mark.parametrize("backend", BACKENDS)
def test_proposals_start_at_the_starting_point_and_never_repeat(backend):
    task = case_task("add_rows", "bfloat16")
    facts = ew.match(task)
    tried = family_check.proposal_chain(task, backend, steps=40, seed=5)
    first = tried[0]
    assert first.params == ew.start(facts, backend, HW) and first.rationale.startswith("starting point: ")
    assert len({p.source for p in tried}) == len(tried)  # never the same kernel twice
    assert all(space_of(facts, backend).contains(p.params) for p in tried)
    assert len(tried) >= min(41, len(all_points(facts, backend)))
