"""The reduce family: sum.dim_IntList, mean.dim, amax and amin over any dims.

What it matches (and why not), how the dims map onto [outer, R1, mid, R2, inner], the start
rules on realistic shapes (the middle-dim column reduction splits R to fill the SMs), every
sampled point renders its own source, and the proposer starts at the rule's point and never
repeats itself. Nothing here builds a kernel: the sweep (test_sweep.py, on the cases of
sweep_cases.py) checks every variant on every backend, that amax and amin keep a NaN as eager
does included (family_check's nan input set).
"""

from __future__ import annotations

import math
import random

import family_check
import pytest
import torch
from family_check import channels_last, make_task, tensor

from kernforge.backends.scan import scan_source
from kernforge.propose.builtin import Hardware
from kernforge.propose.families import reduce
from kernforge.records.task import KernelTask
from kernforge.tasks import resolve_op

pytestmark = pytest.mark.unit

MEAN, SUM, AMAX, AMIN = "aten::mean.dim", "aten::sum.dim_IntList", "aten::amax.default", "aten::amin.default"
HW = Hardware()


def task_for(op: str, shape, dims, keepdim=False, dtype="torch.float32", stride=None, kwargs=None):
    args = [tensor(list(shape), dtype, stride), dims, keepdim]
    task = make_task(op, args)
    if kwargs is not None:
        task.args.append({"kwargs": kwargs})
    return task


def cl_task(op: str, shape, dims=(2, 3), keepdim=True, dtype="torch.float32", meta=False):
    maker = meta_task if meta else task_for
    return maker(op, shape, list(dims), keepdim, dtype, channels_last(list(shape)))


def meta_task(op: str, shape, dims, keepdim=False, dtype="torch.float32", stride=None) -> KernelTask:
    """A task on a realistic shape whose output is found on the meta device: nothing allocated."""
    x = tensor(list(shape), dtype, stride)
    real = torch.empty_strided(x["shape"], x["stride"], dtype=getattr(torch, dtype[6:]), device="meta")
    y = resolve_op(op)(real, dims, keepdim)
    outputs = [{"shape": list(y.shape), "dtype": str(y.dtype), "stride": list(y.stride()), "device": "cpu"}]
    return KernelTask(task_id="t0-meta", op=op, signature="meta", args=[x, dims, keepdim], outputs=outputs,
                      samples=[], share=0.5, gain_if_2x=1.33, time_us=10.0, device="cpu")


def view(facts) -> tuple[int, ...]:
    return facts["outer"], facts["r1"], facts["mid"], facts["r2"], facts["inner"]


def sampled(facts, backend, count=4, seed=0) -> list[dict]:
    return reduce.space(facts, backend, HW).sample(random.Random(seed), count)


# ---------------------------------------------------------------- what is supported

@pytest.mark.parametrize("task, layout, shape", [
    # ResNet-50's adaptive_avg_pool2d 1x1: rows of 49
    (meta_task(MEAN, (32, 2048, 7, 7), [-1, -2], True), "rows", (32 * 2048, 49, 1, 1, 1)),
    # the same on a channels-last input: columns of 2048 channels
    (cl_task(MEAN, (32, 2048, 7, 7), (-1, -2), meta=True), "columns", (32, 49, 1, 1, 2048)),
    (cl_task(SUM, (2, 5, 3, 4), keepdim=False), "columns", (2, 12, 1, 1, 5)),
    (task_for(AMAX, (4, 6, 8), [1, 2]), "rows", (4, 48, 1, 1, 1)),
    (task_for(SUM, (4, 6, 8), [], False), "rows", (1, 192, 1, 1, 1)),  # [] reduces every dim, as ATen does
    (task_for(MEAN, (4, 6, 8), [-1]), "rows", (24, 8, 1, 1, 1)),
    (task_for(SUM, (4, 1, 8), [0, 1]), "columns", (1, 4, 1, 1, 8)),  # a size-1 dim between does not matter
    (cl_task(MEAN, (2, 5, 3, 4), (1,)), "rows", (24, 5, 1, 1, 1)),  # channels-last over C: C is innermost
    (meta_task(SUM, (8, 4096, 2047), [1]), "columns", (8, 4096, 1, 1, 2047)),  # the middle dim
    (task_for(AMIN, (37, 29), [0]), "columns", (1, 37, 1, 1, 29)),  # the first dim
    (task_for(MEAN, (3, 4, 5), [0, 2]), "two_blocks", (1, 3, 4, 5, 1)),  # dims apart in memory
    (task_for(SUM, (3, 4, 5, 6), [1, 3], True), "two_blocks", (3, 4, 5, 6, 1)),
    (task_for(AMAX, (3, 4, 5, 6), [0, 2]), "two_blocks", (1, 3, 4, 5, 6)),
    (cl_task(MEAN, (2, 5, 3, 4), (1, 2)), "two_blocks", (2, 3, 4, 5, 1)),  # C and H: W lies between
])
def test_reductions_view_as_outer_r1_mid_r2_inner(task, layout, shape):
    facts = reduce.match(task)
    assert not isinstance(facts, str), facts
    assert facts["layout"] == layout and view(facts) == shape
    assert facts["r"] == facts["r1"] * facts["r2"]
    assert facts["out_shape"] == task.outputs[0]["shape"]
    assert facts["out_stride"] == task.outputs[0]["stride"]
    for backend in ("cpu", "triton"):
        assert reduce.space(facts, backend, HW) is not None


@pytest.mark.parametrize("task, words", [
    (task_for(SUM, (3, 4), [1], kwargs={"dtype": "torch.float64"}), "dtype= argument"),
    (task_for(SUM, (3, 4), [1], dtype="torch.float64"), "sum on torch.float64"),
    (task_for(AMIN, (2, 3, 4, 5, 6), [0, 2, 4]), "three or more separate blocks"),
    (task_for(AMAX, (3, 4), [1], stride=[8, 2]), "not dense"),
    (task_for(SUM, (0, 4), [1]), "empty tensor"),
    (task_for("aten::prod.dim_int", (3, 4), 1), "no built-in template for aten::prod.dim_int"),
])
def test_unsupported_cases_say_why(task, words):
    reason = reduce.match(task)
    assert isinstance(reason, str) and words in reason, reason


def test_an_int_dim_is_a_list_of_one():
    assert view(reduce.match(task_for(SUM, (3, 4), 1))) == (3, 4, 1, 1, 1)


def test_no_cuda_kernels_yet():
    assert reduce.space(reduce.match(task_for(SUM, (3, 4), 1)), "cuda", HW) is None


# ---------------------------------------------------------------- the spaces and the start rules

SPACE_TASKS = [
    meta_task(MEAN, (256, 2048, 7, 7), [-1, -2], True),
    cl_task(MEAN, (256, 2048, 7, 7), meta=True),
    cl_task(SUM, (1, 256, 64, 64), meta=True),
    meta_task(SUM, (8, 1 << 20), [-1]),
    meta_task(AMAX, (4096, 4096), [-1], dtype="torch.bfloat16"),
    meta_task(SUM, (4096, 4096), []),
    meta_task(MEAN, (7, 300), [1]),
    meta_task(SUM, (8, 4096, 2047), [1]),
    meta_task(SUM, (8192, 8192), [0], dtype="torch.bfloat16"),
    meta_task(SUM, (64, 512, 1024), [0, 2]),
    meta_task(AMIN, (32, 512, 56, 56), [2, 3], dtype="torch.bfloat16"),
]
IDS = [f"{t.op.split('::')[1]}-{'x'.join(map(str, t.args[0]['shape']))}-{t.args[1]}" for t in SPACE_TASKS]


@pytest.mark.parametrize("task", SPACE_TASKS, ids=IDS)
@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_sampled_points_render_their_own_sources_and_the_start_is_a_point(task, backend):
    facts = reduce.match(task)
    space = reduce.space(facts, backend, HW)
    points = sampled(facts, backend, count=20)
    assert len(points) > 1
    sources = [reduce.render(facts, backend, p) for p in points]
    assert len(set(sources)) == len(sources)
    assert space.contains(reduce.start(facts, backend, HW))


def _programs(facts, point) -> int:
    if facts["layout"] == "rows":
        return math.ceil(facts["outer"] / point.get("rows_per_program", 1)) * point.get("split", 1)
    tiles = facts["outer"] * facts["mid"] * math.ceil(facts["inner"] / point["block_c"])
    return tiles * point.get("split", 1)


@pytest.mark.parametrize("task", SPACE_TASKS, ids=IDS)
def test_the_triton_start_fills_the_sms(task):
    facts = reduce.match(task)
    p = reduce.start(facts, "triton", HW)
    elements = facts["outer"] * facts["r"] * facts["mid"] * facts["inner"]
    if elements >= 8192 * HW.sms:  # work enough for every SM
        assert _programs(facts, p) >= HW.sms // 2, p
    # Outputs enough for PROGRAMS_PER_SM tiles of 256 per SM: no split needed.
    if facts["outer"] * facts["mid"] * facts["inner"] >= reduce.PROGRAMS_PER_SM * 256 * HW.sms:
        assert "split" not in p, p


def test_the_middle_dim_column_reduction_splits_r_over_coalesced_tiles():
    """sum over dim 1 of (8, 4096, 2047) fp32: 8 x 8 tiles of 256 floats leave the H200's 132
    SMs half idle, so R is split until there are 4 programs per SM; the partials (1 MB) fit L2."""
    facts = reduce.match(meta_task(SUM, (8, 4096, 2047), [1]))
    p = reduce.start(facts, "triton", HW)
    assert p["variant"] == "split_columns"
    assert p["block_c"] * 4 == 1024  # 1 KB of contiguous floats per tile row
    assert _programs(facts, p) >= reduce.PROGRAMS_PER_SM * HW.sms > _programs(facts, p) // 2
    assert 8 * 2047 * p["split"] * 4 <= HW.l2_bytes // 4
    # On a GPU with 4x the SMs the rule splits further; with a tiny L2 it splits less.
    assert reduce.start(facts, "triton", Hardware(sms=4 * HW.sms))["split"] > p["split"]
    small_l2 = reduce.start(facts, "triton", Hardware(l2_bytes=2**20))
    assert small_l2.get("split", 1) < p["split"]


def test_the_first_dim_and_many_outputs():
    first = reduce.start(reduce.match(meta_task(SUM, (8192, 8192), [0], dtype="torch.bfloat16")), "triton", HW)
    assert first["variant"] == "split_columns" and first["block_c"] == 512  # 1 KB of bf16
    many = reduce.start(reduce.match(cl_task(MEAN, (256, 2048, 7, 7), meta=True)), "triton", HW)
    assert many["variant"] == "columns"  # 2048 tiles already fill the SMs


def test_rows_start_packs_short_rows_and_splits_few_long_ones():
    short = reduce.start(reduce.match(SPACE_TASKS[0]), "triton", HW)  # 524288 rows of 49 floats
    # 3 rows in 4 start off a 16-byte boundary: loads from the boundary below, 64 rows in a tile.
    assert short == {"variant": "rows_aligned", "rows_per_program": 64, "num_warps": 8}
    bf16 = reduce.match(meta_task(MEAN, (256, 2048, 7, 7), [-1, -2], True, "torch.bfloat16"))
    assert reduce._aligned_block(bf16) == 64  # 49 + 7 slots of shift
    aligned_rows = reduce.match(meta_task(MEAN, (256, 2048, 8, 8), [-1, -2], True))
    assert reduce.start(aligned_rows, "triton", HW)["variant"] == "rows"  # rows of 64 start on boundaries
    long = reduce.start(reduce.match(SPACE_TASKS[3]), "triton", HW)  # 8 rows of 2^20
    assert long["variant"] == "split_rows" and long["split"] * 8 >= reduce.PROGRAMS_PER_SM * HW.sms
    assert reduce.start(reduce.match(SPACE_TASKS[3]), "cpu", HW)["variant"] == "split_rows"
    assert reduce.start(reduce.match(SPACE_TASKS[4]), "triton", HW)["variant"] == "rows"


@pytest.mark.parametrize("task", SPACE_TASKS[:4] + SPACE_TASKS[7:], ids=IDS[:4] + IDS[7:])
@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_float32_sources_pass_the_scan(task, backend):
    facts = reduce.match(task)
    language = "c" if backend == "cpu" else "triton"
    for p in sampled(facts, backend, count=3):
        source = reduce.render(facts, backend, p)
        assert f"kf-op: {task.op}" in source
        assert scan_source(source, language, facts["dtype"]) == []


def test_every_move_has_a_reason():
    for task in SPACE_TASKS:
        facts = reduce.match(task)
        for backend in ("cpu", "triton"):
            space = reduce.space(facts, backend, HW)
            point = reduce.start(facts, backend, HW)
            for name, new, _ in space.moves(point):
                assert reduce.explain(name, point[name], new) != "try a neighbouring value", (name, new)


# ---------------------------------------------------------------- the proposer, end to end

@pytest.mark.parametrize("task", [SPACE_TASKS[0], SPACE_TASKS[1], SPACE_TASKS[3], SPACE_TASKS[7], SPACE_TASKS[9]],
                         ids=["rows", "channels-last", "long-rows", "middle-dim", "two-blocks"])
@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_proposer_starts_at_the_rule_and_never_repeats(task, backend):
    facts = reduce.match(task)
    space = reduce.space(facts, backend, HW)
    tried = family_check.proposal_chain(task, backend, steps=30, seed=2)
    assert tried[0].params == reduce.start(facts, backend, HW)
    assert tried[0].rationale.startswith("starting point: ")
    assert len({p.source for p in tried}) == len(tried)  # never the same kernel twice
    assert all(space.contains(p.params) for p in tried)
    # It stops only when the space is spent: the cpu spaces hold a few points, Triton's hundreds.
    assert len(tried) == min(31, len(space.sample(random.Random(0), 1000)))

