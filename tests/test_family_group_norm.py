"""The group norm family: support and refusals, its spaces and start rules on the H200 targets,
and the proposer end to end. Nothing here builds a kernel: the sweep (test_sweep.py, on the cases
of sweep_cases.py) checks them against the ATen op on every backend; test_gn_waiting.py compiles
the waiting forms for Hopper."""

from __future__ import annotations

import random

import family_check
import pytest
from family_check import channels_last, family_for, make_task, tensor

from kernforge.backends.scan import scan_source
from kernforge.propose.builtin import BuiltinProposer, Hardware
from kernforge.propose.families import group_norm as gn
from kernforge.records.task import KernelTask

pytestmark = pytest.mark.unit

GN = gn.OP
F32, BF16, F16 = "torch.float32", "torch.bfloat16", "torch.float16"
HW = Hardware()


def gn_args(shape, groups, dtype=F32, affine=True, stride=None):
    n, c = shape[:2]
    hw = 1
    for s in shape[2:]:
        hw *= s
    w = tensor([c], dtype) if affine else None
    return [tensor(shape, dtype, stride), w, tensor([c], dtype) if affine else None, n, c, hw, groups, 1e-5]


def fake_task(op, args, outputs):
    return KernelTask(task_id="t0", op=op, signature="s", args=args, outputs=outputs, samples=[], share=0.5,
                      gain_if_2x=1.33, time_us=10.0, device="cuda")


def target_task(shape, groups, dtype=BF16):
    """A group norm as CUDA lists it (fp32 statistics), without running it: the H200 targets are
    too large to draw inputs for in a unit test."""
    shape = list(shape)
    stats = tensor([shape[0], groups], F32)
    return fake_task(GN, gn_args(shape, groups, dtype), [tensor(shape, dtype), stats, dict(stats)])


def facts_of(shape, groups, dtype=BF16):
    return gn.match(target_task(shape, groups, dtype))


# Small odd shapes: groups of odd size, 3-D input, no affine.
SMALL = {"affine": lambda dt: gn_args([2, 6, 5, 7], 3, dt), "plain": lambda dt: gn_args([3, 8, 9], 2, dt, affine=False)}


# ---------------------------------------------------------------- what is supported

@pytest.mark.parametrize("case", sorted(SMALL))
@pytest.mark.parametrize("backend", ["cpu", "triton", "cuda"])
def test_supported_cases_match(case, backend):
    task = make_task(GN, SMALL[case](F32))
    assert BuiltinProposer().why_unsupported(task, backend) is None
    assert family_for(task)[0].name == "group_norm"


@pytest.mark.parametrize("args, words", [
    (gn_args([2, 4, 3, 5], 2, stride=channels_last([2, 4, 3, 5])), "channels-last"),
    (gn_args([2, 4, 3, 5], 3), "do not split into whole groups"),
    (gn_args([2, 4, 3, 5], 2, "torch.float64"), "group norm on torch.float64"),
    (gn_args([2, 4, 3, 5], 2)[:1] + [tensor([4], F16)] + gn_args([2, 4, 3, 5], 2)[2:], "weight of dtype torch.float16"),
])
def test_unsupported_cases_say_why(args, words):
    task = fake_task(GN, args, [tensor([2, 4, 3, 5]), tensor([2, 2]), tensor([2, 2])])
    for backend in ("cpu", "triton", "cuda"):
        reason = BuiltinProposer().why_unsupported(task, backend)
        assert reason is not None and words in reason, reason


def test_other_ops_are_refused_with_the_op_named():
    task = fake_task("aten::bmm.default", [tensor([2, 3, 4]), tensor([2, 4, 5])], [tensor([2, 3, 5])])
    assert gn.match(task) == "no built-in template for aten::bmm.default"


def test_no_metal_template():
    task = make_task(GN, SMALL["affine"](F32))
    assert BuiltinProposer().why_unsupported(task, "metal") == "no metal template for group_norm"


def test_statistics_follow_the_task_outputs():
    # CPU group norm keeps bf16 statistics beside a bf16 input, CUDA's are fp32: the kernels
    # allocate what the task lists
    task = make_task(GN, gn_args([2, 4, 8, 8], 2, BF16))
    facts = gn.match(task)
    assert not facts["stats_fp32"]
    cuda_like = fake_task(GN, task.args, [task.outputs[0]] + [{**o, "dtype": F32} for o in task.outputs[1:]])
    facts = gn.match(cuda_like)
    assert facts["stats_fp32"]
    for backend, line in (("triton", "STATS_FP32 = True"), ("cpu", "#define STATS_FP32 1"),
                          ("cuda", "#define STATS_FP32 1")):
        assert line in gn.render(facts, backend, gn.start(facts, backend, HW)), backend


# ---------------------------------------------------------------- spaces and starting points

def test_the_space_is_conditional_not_a_product():
    """The flat space had 1.34M points on the large group norm, 6,879 of them valid, and a move
    enumerated it; each variant now has only its own parameters."""
    space = gn.space(facts_of((1, 256, 512, 512), 32), "triton", HW)
    assert set(space.variants) == {"per_group", "split", "resident", "queue", "held"}
    assert space.size() < 100_000
    assert [p.name for p in space.variants["held"].params] == ["chunk", "num_warps", "unroll", "pipeline",
                                                               "per_sm", "lead"]
    assert {p.name for p in space.variants["per_group"].params} == {"block", "num_warps"}
    assert {p.name for p in space.variants["split"].params} >= {"reverse", "wave_groups"}
    # the ranges follow the facts: one group of 1024 has no waves, and no chunks of 64K
    small = gn.space(facts_of((1, 4, 16, 16), 1, F32), "triton", HW)
    assert small.variants["split"].param("wave_groups").values == (0,)
    assert max(small.variants["queue"].param("chunk").values) < 1024


@pytest.mark.parametrize("case", sorted(SMALL))
@pytest.mark.parametrize("backend", ["cpu", "triton", "cuda"])
def test_sampled_points_render_distinct_sources(case, backend):
    task = make_task(GN, SMALL[case](BF16))
    facts = gn.match(task)
    space = gn.space(facts, backend, HW)
    assert space.contains(gn.start(facts, backend, HW))
    points = space.sample(random.Random(0), 50)
    sources = {gn.render(facts, backend, p) for p in points}
    assert len(sources) == len(points) > 1


def test_start_rules_for_the_h200_targets():
    facts = facts_of((1, 512, 128, 128), 32)  # 16 MB: fits in L2, split into 512 programs
    start = gn.start(facts, "triton", HW)
    assert start["variant"] == "split" and start["reverse"]
    assert facts["n_groups"] * -(-facts["group_size"] // start["chunk"]) == 512
    large = facts_of((1, 256, 512, 512), 32)  # 128 MB: held, 256 chunks a group, 2 programs an SM
    start = gn.start(large, "triton", HW)
    assert start == {"variant": "held", "chunk": 8192, "num_warps": 4, "unroll": 1, "pipeline": True, "per_sm": 2,
                     "lead": 4}
    # a group too large to hold two programs an SM at 128 bytes a thread, and float32: the queue
    for shape, dtype in (((1, 128, 1024, 1024), BF16), ((1, 256, 512, 512), F32)):
        facts = facts_of(shape, 32, dtype)
        start = gn.start(facts, "triton", HW)
        assert start["variant"] == "queue" and gn.space(facts, "triton", HW).contains(start), shape
    assert gn.start(facts_of((64, 64, 8, 8), 32), "triton", HW)["variant"] == "per_group"
    # the rule reads the machine: with twice the SMs, chunks half the size (held: two programs an
    # SM; split: three), and in an L2 of 8 MB the 16 MB row is read twice from DRAM by split: the queue
    assert gn.start(facts_of((1, 512, 128, 128), 32), "triton", Hardware(l2_bytes=8 * 2**20))["variant"] == "queue"
    assert gn.start(facts_of((1, 256, 512, 512), 32), "triton", Hardware(sms=264))["chunk"] == 4096
    assert gn.start(facts_of((1, 512, 128, 128), 32), "triton", Hardware(sms=264))["chunk"] == 8192
    # CPU: few groups spread planes over the cores, many groups a thread each
    assert gn.start(facts_of((1, 512, 128, 128), 32), "cpu", HW) == {"variant": "planes", "simd": True}
    assert gn.start(facts_of((8, 64, 8, 8), 32), "cpu", HW)["variant"] == "groups"


@pytest.mark.parametrize("shape, groups, dtype", [
    ((1, 512, 128, 128), 32, BF16), ((1, 256, 512, 512), 32, BF16), ((1, 256, 510, 514), 32, BF16),
    ((2, 6, 5, 7), 3, F32), ((1, 128, 1024, 1024), 32, F16), ((16, 320, 64, 64), 32, F32), ((4, 32, 1, 1), 8, F32),
    ((1, 3, 1000, 999), 1, BF16)])
@pytest.mark.parametrize("backend", ["cpu", "triton", "cuda"])
def test_starts_are_points_of_the_space_on_realistic_shapes(shape, groups, dtype, backend):
    facts = facts_of(shape, groups, dtype)
    for hw in (HW, Hardware(sms=108, l2_bytes=40 * 2**20), Hardware(sms=16, l2_bytes=4 * 2**20)):
        assert gn.space(facts, backend, hw).contains(gn.start(facts, backend, hw)), (hw, gn.start(facts, backend, hw))


def test_float32_sources_never_mention_half_types():
    for make in SMALL.values():
        task = make_task(GN, make(F32))
        facts = gn.match(task)
        for backend, language in (("cpu", "c"), ("triton", "triton"), ("cuda", "cuda")):
            for p in gn.space(facts, backend, HW).sample(random.Random(0), 20):
                source = gn.render(facts, backend, p)
                named = [t for t in ("_Float16", "__half", "__nv_bfloat16", "tl.bfloat16", "tl.float16",
                                     "torch.bfloat16", "torch.float16") if t in source]
                assert not named, (backend, p, named)
                assert not scan_source(source, language, "float32")
    large = facts_of((1, 64, 256, 256), 32, F32)
    held = {"variant": "held", "chunk": 4096, "num_warps": 4, "unroll": 1, "pipeline": True, "per_sm": 2, "lead": 4}
    assert gn.space(large, "triton", HW).contains(held)
    assert "PAIR_CVT = None" in gn.render(large, "triton", held)


# ---------------------------------------------------------------- the proposer end to end

@pytest.mark.parametrize("shape, groups", [([1, 4, 64, 64], 2), ([1, 256, 512, 512], 32)], ids=["small", "large"])
@pytest.mark.parametrize("backend", ["cpu", "triton", "cuda"])
def test_proposals_start_at_the_start_and_never_repeat(shape, groups, backend):
    task = target_task(shape, groups)
    facts = gn.match(task)
    tried = family_check.proposal_chain(task, backend, steps=40, seed=2)
    assert tried[0].params == gn.start(facts, backend, HW)
    assert tried[0].rationale.startswith("starting point: ")
    assert len({p.source for p in tried}) == len(tried)  # never the same kernel twice
    space = gn.space(facts, backend, HW)
    assert all(space.contains(p.params) for p in tried)
    assert len(tried) > 3


def test_moves_are_explained():
    assert gn.explain("variant", "split", "held") != "try a neighbouring value"
    assert "L2" in gn.explain("reverse", False, True)
    assert "SM" in gn.explain("chunk", 16384, 8192)


def test_programs_per_sm_only_where_programs_wait_and_resident_ones_at_most_two():
    large = facts_of((1, 256, 512, 512), 32)
    space = gn.space(large, "triton", HW)
    best = {"variant": "resident", "chunk": 32768, "block": 16384, "num_warps": 16, "unroll": 1, "pipeline": False,
            "per_sm": 2}  # the best resident point on the H200
    assert space.contains(best)
    assert not space.contains({**best, "per_sm": 4})  # two at most, cooperatively
    assert not space.contains({**best, "lead": 4})  # only the queue and held have a lead
    assert not space.contains({**best, "num_warps": 32})  # 2 x 32 warps
    assert space.contains({**best, "per_sm": 1, "num_warps": 32})
    split = gn.start(facts_of((1, 512, 128, 128), 32), "triton", HW)
    assert not gn.space(facts_of((1, 512, 128, 128), 32), "triton", HW).contains({**split, "per_sm": 2})
    source = gn.render(large, "triton", best)
    assert "PER_SM = 2" in source and "launch_cooperative_grid=PER_SM > 1" in source


WAITING_POINTS = {"resident": {"variant": "resident", "chunk": 32768, "block": 16384, "num_warps": 16, "unroll": 1,
                               "pipeline": True, "per_sm": 2},
                  "queue": {"variant": "queue", "chunk": 8192, "block": 4096, "num_warps": 4, "unroll": 1,
                            "per_sm": 8, "lead": 4}}


class _Recorder:
    """A stand-in for a triton kernel: `kernel[grid](...)` records the kernel's name."""

    def __init__(self, name, launched):
        self.name, self.launched = name, launched

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launched.append(self.name)


@pytest.mark.parametrize("variant", sorted(WAITING_POINTS))
def test_a_waiting_variant_launches_its_own_entry_kernel(variant, tmp_path):
    """resident and queue render one kernel file whose SCHEDULE constant picks the entry kernel: a
    resident point that launched the queue would still pass every correctness check."""
    pytest.importorskip("triton")
    import torch

    from kernforge.runtime.importing import import_path

    path = tmp_path / "gn.py"
    path.write_text(gn.render(facts_of((1, 256, 512, 512), 32), "triton", WAITING_POINTS[variant]))
    module = import_path(path, "gn_waiting")
    launched = []
    for name in ("fill", "gn_resident", "gn_queue"):  # record the launches instead of running them
        setattr(module, name, _Recorder(name, launched))
    x = torch.empty(1)
    module.launch(x, x, x, x, x, x)
    assert {n for n in launched if n != "fill"} == {f"gn_{variant}"}


def test_held_points_are_resident_and_fit_the_registers():
    """A held group must fit the GPU's programs at once, and an SM's programs its registers: at
    most 32 KB of chunk an SM (four programs an SM of 16 KB chunks took 0.20-0.21 ms on the H200)."""
    large = facts_of((1, 256, 512, 512), 32)  # groups of 2M bf16: 4 MB over 132 SMs
    space = gn.space(large, "triton", HW)
    start = gn.start(large, "triton", HW)
    assert start["variant"] == "held"
    assert not space.contains({**start, "per_sm": 4})  # 64 KB an SM
    assert not space.contains({**start, "chunk": 4096})  # 512 programs, 264 slots
    assert space.contains({**start, "chunk": 4096, "per_sm": 4})
    assert not space.contains({**start, "num_warps": 2})  # 256 bytes a thread
    assert not space.contains({**start, "block": 4096})  # held reads no block
    assert not space.contains({**start, "lead": 2})  # lead 3 is already in registers
    assert space.contains({**start, "lead": 2, "pipeline": False})
    undivided = facts_of((1, 256, 510, 514), 32)  # 256 chunks of 8K, the last short
    assert gn.start(undivided, "triton", HW) == {**start, "lead": 3}  # no prefetch
    assert not gn.space(undivided, "triton", HW).contains(start)
    odd = facts_of((1, 256, 511, 511), 32)  # HxW odd: a word's two values would straddle channels
    assert gn.space(odd, "triton", HW).contains({**start, "lead": 3})
    assert "PAIR_CVT = None" in gn.render(odd, "triton", {**start, "lead": 3})
    assert "PAIR_CVT = 'cvt.rn.bf16x2.f32" in gn.render(undivided, "triton", {**start, "lead": 3})
    held = space.sample(random.Random(0), 5000)
    held = [p for p in held if p.get("variant") == "held"]
    assert len(held) >= 10
    for p in held:
        assert p["per_sm"] * p["chunk"] * 2 <= 32768
        assert -(-large["group_size"] // p["chunk"]) <= p["per_sm"] * HW.sms  # all resident
