"""The norms family (layer, RMS, group and inference batch norm): support, spaces, every C variant and a
covering sample of Triton variants checked against the ATen op itself."""

from __future__ import annotations

import importlib.util

import family_check
import pytest
import torch
from family_check import channels_last, check_params, make_task, tensor
from family_check import legacy_family_for as family_for

from kernforge.backends import cpu
from family_check import all_points as _all_points
from kernforge.propose.builtin import BuiltinProposer
from kernforge.propose.templates import norms
from kernforge.propose.families.common import gpu_sms
from kernforge.tasks import KernelTask

LN, RMS, GN = norms.LAYER_NORM_OP, norms.RMS_NORM_OP, norms.GROUP_NORM_OP
BN, BN_LEGIT, BN_CUDNN = norms.BATCH_NORM_OPS
F32, BF16, F16 = "torch.float32", "torch.bfloat16", "torch.float16"
HAVE_TRITON = importlib.util.find_spec("triton") is not None


def ln_args(shape, dtype=F32, affine=True, normalized=None):
    cols = normalized or shape[-1:]
    w = tensor(cols, dtype) if affine else None
    return [tensor(shape, dtype), cols, w, tensor(cols, dtype) if affine else None, 1e-5]


def rms_args(shape, dtype=F32, affine=True, eps=None):
    return [tensor(shape, dtype), shape[-1:], tensor(shape[-1:], dtype) if affine else None, eps]


def gn_args(shape, groups, dtype=F32, affine=True, stride=None):
    n, c = shape[:2]
    hw = 1
    for s in shape[2:]:
        hw *= s
    w = tensor([c], dtype) if affine else None
    return [tensor(shape, dtype, stride), w, tensor([c], dtype) if affine else None, n, c, hw, groups, 1e-5]


def bn_args(shape, dtype=F32, layout="nchw", op=BN, affine=True, stats_dtype=None):
    c = shape[1]
    sd = stats_dtype or dtype
    x = tensor(shape, dtype, channels_last(shape) if layout == "nhwc" else None)
    w = tensor([c], sd) if affine else None
    params = [x, w, tensor([c], sd) if affine else None, tensor([c], sd), tensor([c], sd, positive=True)]
    return params + ([False, 0.1, 1e-5] if op == BN else [0.1, 1e-5])


# Small odd shapes: rows and columns not multiples of any block; groups of odd size.
C_CASES = [
    ("ln-affine", LN, lambda dt: ln_args([5, 3, 37], dt, normalized=[3, 37])),
    ("ln-plain", LN, lambda dt: ln_args([7, 300], dt, affine=False)),
    ("rms-affine", RMS, lambda dt: rms_args([7, 300], dt, eps=1e-6)),
    ("rms-default-eps", RMS, lambda dt: rms_args([3, 2, 37], dt, affine=False)),
    ("gn-affine", GN, lambda dt: gn_args([2, 6, 5, 7], 3, dt)),
    ("gn-plain", GN, lambda dt: gn_args([3, 8, 9], 2, dt, affine=False)),
    ("bn-nchw", BN, lambda dt: bn_args([2, 3, 5, 7], dt)),
    ("bn-nhwc", BN_LEGIT, lambda dt: bn_args([2, 5, 3, 7], dt, "nhwc", BN_LEGIT)),
]


def facts_of(op, args):
    return family_for(make_task(op, args))


# ---------------------------------------------------------------- what is supported

@pytest.mark.parametrize("name, op, make", C_CASES)
@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_supported_cases_match(name, op, make, backend):
    assert BuiltinProposer().why_unsupported(make_task(op, make(F32)), backend) is None


def test_each_op_goes_to_its_family():
    names = {op: facts_of(op, make(F32))[0].name for _, op, make in C_CASES}
    assert names == {LN: "layer_norm", RMS: "rms_norm", GN: "group_norm", BN: "batch_norm",
                     BN_LEGIT: "batch_norm"}


def fake_task(op, args, outputs):
    return KernelTask(task_id="t0", op=op, signature="s", args=args, outputs=outputs, samples=[], share=0.5,
                      gain_if_2x=1.33, time_us=10.0, device="cuda")


@pytest.mark.parametrize("op, args, words", [
    (LN, [tensor([4, 8], F32, [1, 4]), [8], None, None, 1e-5],
     "layer norm on a non-contiguous input"),
    (LN, ln_args([4, 8], "torch.float64"), "layer norm on torch.float64"),
    (RMS, [tensor([4, 8]), [4], None, None], "normalized_shape is not the input's trailing dims"),
    (GN, gn_args([2, 4, 3, 5], 2, stride=channels_last([2, 4, 3, 5])), "channels-last"),
    (BN, bn_args([2, 3, 4, 5])[:5] + [True, 0.1, 1e-5], "training mode"),
    (BN, bn_args([2, 3, 4, 5], stats_dtype=F16), "weight of dtype torch.float16"),
])
def test_unsupported_cases_say_why(op, args, words):
    task = fake_task(op, args, [tensor([1])])
    for backend in ("cpu", "triton"):
        reason = BuiltinProposer().why_unsupported(task, backend)
        assert reason is not None and words in reason, reason


def test_other_ops_are_refused_with_the_op_named():
    task = fake_task("aten::bmm.default", [tensor([2, 3, 4]), tensor([2, 4, 5])], [tensor([2, 3, 5])])
    for family in norms.FAMILIES:
        assert family.match(task) == "no built-in template for aten::bmm.default"


def test_no_metal_template():
    task = make_task(LN, ln_args([4, 8]))
    assert BuiltinProposer().why_unsupported(task, "metal") == "no metal template for layer_norm"


def test_statistics_follow_the_task_outputs():
    # CPU layer norm keeps bf16 statistics, CUDA's are fp32: the kernel allocates what the task lists
    task = make_task(LN, ln_args([4, 64], BF16))
    family, facts = family_for(task)
    assert [o["dtype"] for o in facts["outputs"]] == ["bfloat16"] * 3
    cuda_like = fake_task(LN, task.args, [task.outputs[0]] + [
        {**o, "dtype": F32} for o in task.outputs[1:]])
    source = family.render(family.match(cuda_like), "triton", family.initial(facts, "triton"))
    assert "dtype=torch.float32" in source


def test_rms_default_eps_is_float32_epsilon():
    _, facts = facts_of(RMS, rms_args([3, 8], BF16, eps=None))
    assert facts["eps"] == torch.finfo(torch.float32).eps


# ---------------------------------------------------------------- spaces and starting points

def valid_points(family, facts, backend):
    return [p for p in _all_points(family.space(facts, backend)) if family.valid(facts, backend, p)]


@pytest.mark.parametrize("name, op, make", C_CASES)
@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_every_valid_point_renders_a_distinct_source(name, op, make, backend):
    family, facts = facts_of(op, make(BF16))
    points = valid_points(family, facts, backend)
    assert family.initial(facts, backend) in points
    sources = {family.render(facts, backend, p) for p in points}
    assert len(sources) == len(points) > 1
    assert len(points) <= 400  # the search gets ~50 iterations


def target_facts(kind: str) -> dict:
    """The H200 benchmark shapes, with CUDA's fp32 statistics."""
    if kind in ("layer", "rms"):
        task = make_task(LN if kind == "layer" else RMS, (ln_args if kind == "layer" else rms_args)([8, 4096], BF16))
        facts = family_for(task)[1]
        return {**facts, "rows": 8192}
    return family_for(make_task(GN, gn_args(list(kind), 32, BF16)))[1]


def test_initial_points_for_the_h200_targets():
    for kind in ("layer", "rms"):
        start = norms.initial_row_norm(target_facts(kind), "triton")
        # the layer norm's start took 38.4 us in the H200 search (bench/results/h200/search/part3)
        # against a 31.6 us floor
        assert start == {"variant": "single_tile", "rows_per_program": 1, "persistent": False, "block": 4096,
                         "num_warps": 4, "num_stages": 1}
    facts = target_facts((1, 512, 128, 128))  # 16 MB: fits in L2, split into 512 programs
    start = norms.initial_group_norm(facts, "triton")
    assert start["variant"] == "split" and start["reverse"]
    assert facts["n"] * facts["groups"] * -(-facts["group_size"] // start["chunk"]) == 512
    large = target_facts((1, 256, 512, 512))  # 128 MB: held, 256 chunks a group, 2 programs an SM
    start = norms.initial_group_norm(large, "triton")
    assert start == {"variant": "held", "chunk": 8192, "block": 4096, "num_warps": 4, "reverse": False,
                     "wave_groups": 0, "unroll": 1, "pipeline": True, "per_sm": 2, "lead": 4}
    assert norms.valid_group_norm(large, "triton", start)
    # a group too large to hold two programs an SM at 128 bytes a thread, and float32: the queue
    for shape, dtype in (((1, 128, 1024, 1024), BF16), ((1, 256, 512, 512), F32)):
        facts = family_for(make_task(GN, gn_args(list(shape), 32, dtype)))[1]
        start = norms.initial_group_norm(facts, "triton")
        assert start["variant"] == "queue" and norms.valid_group_norm(facts, "triton", start), shape
    small = family_for(make_task(GN, gn_args([64, 64, 8, 8], 32, BF16)))[1]
    assert norms.initial_group_norm(small, "triton")["variant"] == "per_group"
    for layout, variant in (("nchw", "plane"), ("nhwc", "tile")):
        facts = family_for(make_task(BN_LEGIT, bn_args([2, 64, 56, 56], F32, layout, BN_LEGIT)))[1]
        assert norms.initial_batch_norm(facts, "triton")["variant"] == variant


def test_float32_sources_never_mention_half_types():
    for _, op, make in C_CASES:
        family, facts = facts_of(op, make(F32))
        for backend in ("cpu", "triton"):
            for p in valid_points(family, facts, backend):
                source = family.render(facts, backend, p)
                assert "bfloat16" not in source and "float16" not in source and "_Float16" not in source


# ---------------------------------------------------------------- every C variant is correct

def c_variants():
    for name, op, make in C_CASES:
        for dtype in (F32, BF16) + ((F16,) if name in ("ln-affine", "gn-affine", "bn-nhwc") else ()):
            family, facts = facts_of(op, make(dtype))
            for p in valid_points(family, facts, "cpu"):
                yield pytest.param(op, make(dtype), p, id=f"{name}-{dtype[6:]}-" + "-".join(map(str, p.values())))


@pytest.mark.skipif(cpu.unavailable_reason() is not None, reason="gcc is not installed")
@pytest.mark.parametrize("op, args, params", list(c_variants()))
def test_every_c_variant_is_correct(op, args, params, tmp_path_factory):
    work = tmp_path_factory.getbasetemp() / "norms-c"
    assert check_params(make_task(op, args), "cpu", params, work) is None


def cudnn_like_task(saved_shape, layout="nchw"):
    """cudnn_batch_norm cannot run on a CPU: its outputs as CUDA lists them, built by hand."""
    args = bn_args([2, 3, 5, 7], F32, layout)
    x = args[0]
    out = [dict(x), tensor(saved_shape), tensor(saved_shape), tensor([0], "torch.uint8")]
    return fake_task(BN_CUDNN, args, out)


@pytest.mark.skipif(cpu.unavailable_reason() is not None, reason="gcc is not installed")
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("saved", [[0], [3]])
def test_cudnn_and_cuda_saved_statistics(layout, saved, tmp_path):
    # CUDA's native kernels return [C] saved statistics in eval mode (running_mean, 1/sqrt(var+eps));
    # cuDNN returns empty ones. Checked against native_batch_norm on the CPU.
    task = cudnn_like_task(saved, layout)
    family = norms.FAMILIES[3]
    facts = family.match(task)
    assert facts["has_saved"] == (saved == [3])
    path = tmp_path / "bn.c"
    path.write_text(family.render(facts, "cpu", family.initial(facts, "cpu")))
    kernel = cpu.build(path, tmp_path / "build", task.outputs)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 7, generator=g)
    if layout == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)
    w, b, rm = (torch.randn(3, generator=g) for _ in range(3))
    rv = torch.rand(3, generator=g) + 0.5
    y, sm, si, _ = kernel(x, w, b, rm, rv, False, 0.1, 1e-5)
    want = torch.ops.aten.native_batch_norm.default(x, w, b, rm, rv, False, 0.1, 1e-5)[0]
    assert torch.allclose(y, want, atol=1e-5) and y.stride() == x.stride()
    if saved == [3]:
        assert torch.allclose(sm, rm) and torch.allclose(si, (rv + 1e-5).rsqrt())
    triton_source = family.render(facts, "triton", family.initial(facts, "triton"))
    assert "kf-op: aten::cudnn_batch_norm.default" in triton_source
    assert "exponential_average_factor, epsilon" in triton_source


# ---------------------------------------------------------------- Triton variants under the interpreter

def triton_variants() -> list[dict]:
    """Every structural variant of each op at least once, fp32 and bf16, on small shapes."""
    picks = [
        (LN, ln_args([5, 3, 37], normalized=[3, 37]), [
            {"variant": "single_tile", "rows_per_program": 4, "persistent": False, "block": 128, "num_warps": 1},
            {"variant": "single_tile", "rows_per_program": 2, "persistent": True, "block": 128, "num_warps": 2}]),
        (LN, ln_args([3, 1100], affine=False), [
            {"variant": "loop", "rows_per_program": 1, "persistent": False, "block": 512, "num_warps": 4,
             "num_stages": 3}]),
        (RMS, rms_args([7, 300], eps=1e-6), [
            {"variant": "single_tile", "rows_per_program": 2, "persistent": True, "block": 512, "num_warps": 4},
            {"variant": "single_tile", "rows_per_program": 1, "persistent": False, "block": 512, "num_warps": 2}]),
        (RMS, rms_args([3, 1100], affine=False), [
            {"variant": "loop", "rows_per_program": 1, "persistent": False, "block": 512, "num_warps": 2,
             "num_stages": 2}]),
        (GN, gn_args([2, 6, 5, 7], 3), [
            {"variant": "per_group", "chunk": 2048, "block": 256, "num_warps": 2, "reverse": False, "wave_groups": 0}]),
        (GN, gn_args([1, 4, 64, 64], 2), [  # 8192 per group: chunks of 2048, four per group
            {"variant": "split", "chunk": 2048, "block": 512, "num_warps": 4, "reverse": True, "wave_groups": 0},
            {"variant": "split", "chunk": 4096, "block": 1024, "num_warps": 4, "reverse": False, "wave_groups": 0},
            {"variant": "per_group", "chunk": 2048, "block": 1024, "num_warps": 4, "reverse": False,
             "wave_groups": 0}]),
        (GN, gn_args([1, 6, 30, 30], 2), [  # 2700 per group: chunks straddle channels
            {"variant": "split", "chunk": 2048, "block": 512, "num_warps": 2, "reverse": True, "wave_groups": 0}]),
        (GN, gn_args([2, 8, 32, 32], 4), [  # 8 groups of 2048 in waves of 2 and 4, one reversed
            {"variant": "split", "chunk": 2048, "block": 512, "num_warps": 4, "reverse": True, "wave_groups": 2},
            {"variant": "split", "chunk": 2048, "block": 512, "num_warps": 4, "reverse": False, "wave_groups": 4},
            # resident: 4 chunks a group; on the interpreter one group a wave, one pass a launch
            {"variant": "resident", "chunk": 512, "block": 256, "num_warps": 2, "reverse": False, "wave_groups": 0},
            # four blocks of 128 a trip: the chunk in one [4, 128] tile, inside one channel
            {"variant": "resident", "chunk": 512, "block": 128, "num_warps": 2, "reverse": False, "wave_groups": 0,
             "unroll": 4},
            # pipelined: on the interpreter the same two launches (the overlap needs the wait)
            {"variant": "resident", "chunk": 512, "block": 256, "num_warps": 2, "reverse": False, "wave_groups": 0,
             "pipeline": True},
            # two programs per SM: on the GPU a cooperative launch; here the same two launches
            {"variant": "resident", "chunk": 512, "block": 256, "num_warps": 2, "reverse": False, "wave_groups": 0,
             "pipeline": True, "per_sm": 2},
            # the queue: on the interpreter one program takes every ticket in order, which is the
            # order that makes a pass 2 find its group's statistics done
            {"variant": "queue", "chunk": 512, "block": 256, "num_warps": 2, "reverse": False, "wave_groups": 0,
             "lead": 1},
            {"variant": "queue", "chunk": 512, "block": 128, "num_warps": 2, "reverse": False, "wave_groups": 0,
             "unroll": 2, "per_sm": 4, "lead": 8},
            # held: four programs hold a chunk of each group; on the interpreter statistics of
            # every group in one launch, normalising in a second, through the same rotation of chunks
            {"variant": "held", "chunk": 512, "block": 4096, "num_warps": 2, "reverse": False, "wave_groups": 0},
            # and with L2 prefetches 4 groups ahead (a GPU's only: here the same two launches)
            {"variant": "held", "chunk": 512, "block": 4096, "num_warps": 2, "reverse": False, "wave_groups": 0,
             "lead": 4},
            # the chunk as two rows of 256
            {"variant": "held", "chunk": 512, "block": 4096, "num_warps": 1, "reverse": False, "wave_groups": 0,
             "unroll": 2},
            # statistics two groups ahead: four chunks in the rotation, and with prefetches
            {"variant": "held", "chunk": 512, "block": 4096, "num_warps": 2, "reverse": False, "wave_groups": 0,
             "pipeline": True, "lead": 3},
            {"variant": "held", "chunk": 512, "block": 4096, "num_warps": 1, "reverse": False, "wave_groups": 0,
             "pipeline": True, "lead": 4, "unroll": 2}]),
        (GN, gn_args([1, 4, 16, 16], 1), [  # held with one group: nothing loads ahead
            {"variant": "held", "chunk": 256, "block": 4096, "num_warps": 1, "reverse": False, "wave_groups": 0},
            {"variant": "held", "chunk": 256, "block": 4096, "num_warps": 1, "reverse": False, "wave_groups": 0,
             "pipeline": True, "lead": 3}]),
        (GN, gn_args([1, 6, 30, 30], 2), [  # resident with a short last chunk that straddles channels
            {"variant": "resident", "chunk": 1024, "block": 512, "num_warps": 4, "reverse": False, "wave_groups": 0},
            {"variant": "resident", "chunk": 1024, "block": 256, "num_warps": 2, "reverse": False, "wave_groups": 0,
             "unroll": 2},
            {"variant": "queue", "chunk": 1024, "block": 512, "num_warps": 4, "reverse": False, "wave_groups": 0,
             "lead": 2, "per_sm": 2},
            # held: three chunks, the last short, chunks straddling channels
            {"variant": "held", "chunk": 1024, "block": 4096, "num_warps": 4, "reverse": False, "wave_groups": 0},
            {"variant": "held", "chunk": 1024, "block": 4096, "num_warps": 4, "reverse": False, "wave_groups": 0,
             "pipeline": True, "lead": 3}]),
        (BN, bn_args([2, 3, 5, 7]), [{"variant": v, "block": 512, "num_warps": 4} for v in ("flat", "plane")]),
        (BN_LEGIT, bn_args([2, 5, 3, 7], layout="nhwc", op=BN_LEGIT),
         [{"variant": v, "block": 512, "num_warps": 4} for v in ("flat", "tile")]),
    ]
    variants = []
    for op, args, points in picks:
        for dtype in (F32, BF16, F16):
            typed = [dict(a, dtype=dtype) if isinstance(a, dict) and a.get("dtype") == F32 else a for a in args]
            family, facts = facts_of(op, typed)
            for p in points:
                if dtype == F16 and p.get("variant") != "held":
                    continue  # float16 for the held group norm's pairs only, whose unpacking is its own
                params = {**family.initial(facts, "triton"), **p}
                if family.name.endswith("_norm") and "num_stages" in params and params["variant"] == "single_tile":
                    params["num_stages"] = 1
                assert family.valid(facts, "triton", params), (op, params)
                name = "-".join(str(v) for v in params.values())
                variants.append({"id": f"{op.split('::')[1]}-{dtype[6:]}-{typed[0]['shape']}-{name}",
                                 "op": op, "args": typed, "params": params})
    return variants


@pytest.fixture(scope="module")
def triton_results() -> dict:
    return family_check.run_under_interpreter(triton_variants())


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("variant_id", [v["id"] for v in triton_variants()])
def test_triton_variants_are_correct_under_the_interpreter(variant_id, triton_results):
    assert triton_results[variant_id] is None, triton_results[variant_id]


def test_triton_sample_covers_every_structural_variant():
    seen = {(v["op"], v["params"]["variant"], v["params"].get("persistent", False)) for v in triton_variants()}
    for op in (LN, RMS):
        assert {(op, "single_tile", False), (op, "single_tile", True), (op, "loop", False)} <= seen
    assert {(GN, "split", False), (GN, "per_group", False), (GN, "resident", False), (GN, "queue", False),
            (GN, "held", False)} <= seen
    assert {v["params"].get("wave_groups") for v in triton_variants() if v["op"] == GN} >= {0, 2, 4}
    assert {v["params"].get("unroll") for v in triton_variants() if v["op"] == GN} >= {1, 2, 4}
    assert {v["params"].get("pipeline") for v in triton_variants() if v["op"] == GN} == {False, True}
    assert {v["params"].get("per_sm") for v in triton_variants() if v["op"] == GN} == {1, 2, 4}
    assert {v["params"].get("lead") for v in triton_variants() if v["op"] == GN} >= {1, 2, 8}
    assert {(BN, "flat", False), (BN, "plane", False), (BN_LEGIT, "tile", False)} <= seen
    # and against the spaces themselves: a variant added to a family's space without a sample fails
    for v in triton_variants():
        family, facts = facts_of(v["op"], v["args"])
        assert {(v["op"], variant) for variant in family.space(facts, "triton")["variant"]} <= \
            {(op, variant) for op, variant, _ in seen}, v["op"]


# ---------------------------------------------------------------- the proposer end to end

@pytest.mark.parametrize("op, args", [
    (LN, ln_args([5, 3, 37], BF16, normalized=[3, 37])), (RMS, rms_args([7, 300], BF16)),
    (GN, gn_args([1, 4, 64, 64], 2, BF16)), (BN_LEGIT, bn_args([2, 5, 3, 7], BF16, "nhwc", BN_LEGIT)),
], ids=["layer", "rms", "group", "batch"])
@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_proposals_start_at_the_initial_point_and_never_repeat(op, args, backend):
    task = make_task(op, args)
    family, facts = family_for(task)
    tried = family_check.proposal_chain(task, backend, steps=40, seed=2)
    first = tried[0]
    assert first.params == family.initial(facts, backend)
    assert first.rationale.startswith("starting point: ")
    assert len({p.source for p in tried}) == len(tried)  # never the same kernel twice
    assert all(family.valid(facts, backend, p.params) for p in tried[1:])
    assert len(tried) > 3


def test_moves_are_explained():
    for family in norms.FAMILIES:
        assert family.explain("variant", "single_tile", "loop") != "try a neighbouring value"
    assert "L2" in norms.explain("reverse", False, True)
    assert "SM" in norms.explain("chunk", 16384, 8192)


def test_programs_per_sm_only_where_programs_wait_and_resident_ones_at_most_two():
    large = target_facts((1, 256, 512, 512))
    start = {**norms.initial_group_norm(large, "triton"), "variant": "resident", "chunk": 32768, "block": 16384,
             "num_warps": 16, "per_sm": 2, "lead": 2}  # the best resident point on the H200
    assert norms.valid_group_norm(large, "triton", start)
    assert not norms.valid_group_norm(large, "triton", {**start, "per_sm": 4})  # two at most, cooperatively
    assert not norms.valid_group_norm(large, "triton", {**start, "lead": 4})  # only the queue and held have a lead
    assert not norms.valid_group_norm(large, "triton", {**start, "num_warps": 32})  # 2 x 32 warps
    assert norms.valid_group_norm(large, "triton", {**start, "per_sm": 1, "num_warps": 32})
    split = norms.initial_group_norm(target_facts((1, 512, 128, 128)), "triton")
    assert not norms.valid_group_norm(target_facts((1, 512, 128, 128)), "triton", {**split, "per_sm": 2})
    source = norms.render_group_norm(large, "triton", {**start, "per_sm": 2, "num_warps": 16})
    assert "PER_SM = 2" in source and "launch_cooperative_grid=PER_SM > 1" in source


def test_held_points_are_resident_and_fit_the_registers():
    """A held group must fit the GPU's programs at once, and an SM's programs its registers: at
    most 32 KB of chunk an SM (four programs an SM of 16 KB chunks took 0.20-0.21 ms on the H200)."""
    large = target_facts((1, 256, 512, 512))  # groups of 2M bf16: 4 MB over 132 SMs
    start = norms.initial_group_norm(large, "triton")
    assert start["variant"] == "held"
    assert not norms.valid_group_norm(large, "triton", {**start, "per_sm": 4})  # 64 KB an SM
    assert not norms.valid_group_norm(large, "triton", {**start, "chunk": 4096})  # 512 programs, 264 slots
    assert norms.valid_group_norm(large, "triton", {**start, "chunk": 4096, "per_sm": 4})
    assert not norms.valid_group_norm(large, "triton", {**start, "num_warps": 2})  # 256 bytes a thread
    assert not norms.valid_group_norm(large, "triton", {**start, "block": 2048})  # held reads no block
    assert not norms.valid_group_norm(large, "triton", {**start, "lead": 2})  # lead 3 is already in registers
    assert norms.valid_group_norm(large, "triton", {**start, "lead": 2, "pipeline": False})
    undivided = target_facts((1, 256, 510, 514))  # 256 chunks of 8K, the last short
    assert norms.initial_group_norm(undivided, "triton") == {**start, "lead": 3}  # no prefetch
    assert not norms.valid_group_norm(undivided, "triton", start)
    odd = target_facts((1, 256, 511, 511))  # HxW odd: a word's two values would straddle channels
    assert norms.valid_group_norm(odd, "triton", {**start, "lead": 3})
    assert "PAIR_CVT = None" in norms.render_group_norm(odd, "triton", {**start, "lead": 3})
    assert "def unpack" in norms.render_group_norm(undivided, "triton", {**start, "lead": 3})
    # every valid held point of the space, the other parameters at the start's values
    space = norms.space_group_norm(large, "triton")
    held_space = {name: space[name] for name in ("chunk", "num_warps", "unroll", "per_sm", "lead", "pipeline")}
    points = [{**start, **p} for p in _all_points(held_space)]
    held = [p for p in points if norms.valid_group_norm(large, "triton", p)]
    assert len(held) >= 10
    for p in held:
        assert p["per_sm"] * p["chunk"] * 2 <= 32768
        assert -(-large["group_size"] // p["chunk"]) <= p["per_sm"] * gpu_sms()  # all resident
