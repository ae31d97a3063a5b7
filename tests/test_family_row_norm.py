"""The row-norm families (layer norm and RMS norm, propose/families/row_norm/): what they take and
refuse and why, the start rules on realistic shapes, every CPU point and each Triton variant
checked against the ATen op itself, the CUDA variants built, and the proposer end to end."""

from __future__ import annotations

import importlib.util
import random
import shutil

import family_check
import pytest
import torch
from family_check import check_params, family_for, make_task, tensor

from kernforge.backends import cpu
from kernforge.evaluate.scan import scan_source
from kernforge.propose.builtin import BuiltinProposer, Hardware
from kernforge.propose.families import row_norm
from kernforge.tasks import KernelTask

pytestmark = pytest.mark.unit

LN, RMS = row_norm.OPS["layer"], row_norm.OPS["rms"]
F32, BF16, F16 = "torch.float32", "torch.bfloat16", "torch.float16"
HAVE_TRITON = importlib.util.find_spec("triton") is not None
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


# ---------------------------------------------------------------- every CPU point is correct

def c_points():
    for name, op, make in CASES:
        for dtype in (F32, BF16) + ((F16,) if name in ("ln-affine", "rms-affine") else ()):
            family, facts = facts_of(op, make(dtype))
            for p in sampled_points(family, facts, "cpu"):  # every point: the CPU space has eight
                yield pytest.param(op, make(dtype), p, id=f"{name}-{dtype[6:]}-" + "-".join(map(str, p.values())))


@pytest.mark.workers
@pytest.mark.skipif(cpu.unavailable_reason() is not None, reason="gcc is not installed")
@pytest.mark.parametrize("op, args, params", list(c_points()))
def test_every_c_point_is_correct(op, args, params, tmp_path_factory):
    work = tmp_path_factory.getbasetemp() / "row-norm-c"
    assert check_params(make_task(op, args), "cpu", params, work) is None


@pytest.mark.workers
@pytest.mark.skipif(cpu.unavailable_reason() is not None, reason="gcc is not installed")
@pytest.mark.parametrize("op, args", [
    (LN, ln_args([6, 77], BF16, aux_dtype=F32)), (RMS, rms_args([6, 77], F16, eps=1e-5, aux_dtype=F32)),
], ids=["layer-bf16-f32-affine", "rms-f16-f32-weight"])
def test_float32_weights_beside_half_inputs(op, args, tmp_path):
    task = make_task(op, args)
    family, facts = family_for(task)
    assert facts["w_f32"] and facts["dtype"] != "float32"
    assert check_params(task, "cpu", family.start(facts, "cpu", HW), tmp_path) is None


# ---------------------------------------------------------------- Triton variants under the interpreter

def triton_variants() -> list[dict]:
    """Each variant of each op, fp32, bf16 and fp16, on small shapes; a persistent launch whose
    programs walk more than one row block (the interpreter counts 4 SMs: 16 programs)."""
    picks = [
        (LN, ln_args([5, 3, 37], normalized=[3, 37]), [
            {"variant": "single_tile", "rows_per_program": 4, "persistent": False, "num_warps": 1},
            {"variant": "single_tile", "rows_per_program": 2, "persistent": True, "num_warps": 2}]),
        (LN, ln_args([37, 50]), [
            {"variant": "single_tile", "rows_per_program": 1, "persistent": True, "num_warps": 1}]),
        (LN, ln_args([3, 1100], affine=False), [
            {"variant": "loop", "block_n": 512, "num_warps": 4, "num_stages": 3}]),
        (RMS, rms_args([7, 300], eps=1e-6), [
            {"variant": "single_tile", "rows_per_program": 2, "persistent": True, "num_warps": 4},
            {"variant": "loop", "block_n": 512, "num_warps": 2, "num_stages": 1}]),
        (RMS, rms_args([3, 1100], affine=False), [
            {"variant": "loop", "block_n": 1024, "num_warps": 2, "num_stages": 2}]),
    ]
    variants = []
    for op, args, points in picks:
        for dtype in (F32, BF16, F16):
            typed = [dict(a, dtype=dtype) if isinstance(a, dict) and a.get("dtype") == F32 else a for a in args]
            family, facts = facts_of(op, typed)
            for p in points:
                assert family.space(facts, "triton", HW).contains(p), (op, p)
                name = "-".join(str(v) for v in p.values())
                variants.append({"id": f"{op.split('::')[1]}-{dtype[6:]}-{typed[0]['shape']}-{name}",
                                 "op": op, "args": typed, "params": p})
    return variants


@pytest.fixture(scope="module")
def triton_results() -> dict:
    return family_check.run_under_interpreter(triton_variants())


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("variant_id", [v["id"] for v in triton_variants()])
def test_triton_variants_are_correct_under_the_interpreter(variant_id, triton_results):
    assert triton_results[variant_id] is None, triton_results[variant_id]


def test_triton_sample_covers_every_variant():
    seen = {(v["op"], v["params"]["variant"], v["params"].get("persistent", False)) for v in triton_variants()}
    for op in (LN, RMS):
        assert {(op, "single_tile", False), (op, "single_tile", True), (op, "loop", False)} <= seen or \
            {(op, "single_tile", True), (op, "loop", False)} <= seen
    assert (LN, "single_tile", False) in seen
    for v in triton_variants():  # a variant added to the space without a sample fails
        family, facts = facts_of(v["op"], v["args"])
        assert {(v["op"], name) for name in family.space(facts, "triton", HW).variants} <= \
            {(op, variant) for op, variant, _ in seen}, v["op"]


# ---------------------------------------------------------------- CUDA variants build

@pytest.mark.workers
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("op, args", [
    (LN, ln_args([6, 1024], BF16, aux_dtype=F32)), (RMS, rms_args([6, 4096], F16, eps=1e-5)),
    (LN, ln_args([6, 300], F32, affine=False)),
], ids=["layer-bf16-f32-affine", "rms-f16", "layer-f32-plain"])
@pytest.mark.parametrize("cache_row", [True, False])
def test_cuda_points_build(op, args, cache_row, tmp_path):
    from kernforge.backends.cuda import DEFAULT_ARCH, NVCC_FLAGS
    from kernforge.backends.native import compile_library

    family, facts = facts_of(op, args)
    space = family.space(facts, "cuda", HW)
    # a row over several warps (the shared-memory merge) and several rows a block
    point = space.nearest({**family.start(facts, "cuda", HW), "cache_row": cache_row, "rows_per_block": 2},
                          lambda p: p["cache_row"] == cache_row and p["threads_per_row"] >= 64)
    assert point is not None
    source = tmp_path / "candidate.cu"
    source.write_text(family.render(facts, "cuda", point))
    assert compile_library(source, tmp_path / "build", ["nvcc", f"-arch={DEFAULT_ARCH}", *NVCC_FLAGS], "test").exists()


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
                           ("stats", "two_pass", "one_pass_double"), ("cache_row", True, False),
                           ("block_n", 512, 1024), ("threads_per_row", 64, 32), ("vec", 4, 8)):
        assert row_norm.explain(name, old, new) != "try a neighbouring value", name
