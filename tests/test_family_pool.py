"""The pool family: avg_pool2d, _adaptive_avg_pool2d and max_pool2d_with_indices, contiguous
and channels-last.

What it matches (and why not), ATen's output-size rule, every buildable point renders its
own source that passes the scan, the starting rules on realistic shapes, and the proposer
starts at the starting point and never repeats itself. Nothing here builds a kernel: the
sweep (test_sweep.py, on the cases of sweep_cases.py) builds and checks them on every backend.
"""

from __future__ import annotations

import family_check
import pytest
import torch
from family_check import channels_last, make_task, tensor, valid_points

from kernforge.backends.scan import scan_source
from kernforge.propose.builtin import Hardware
from kernforge.propose.families import pool

pytestmark = pytest.mark.unit

AVG, ADAPTIVE, MAX = pool.AVG, pool.ADAPTIVE, pool.MAX
HW = Hardware()
LANGUAGE = {"cpu": "c", "triton": "triton", "cuda": "cuda"}


def avg(shape, kernel, stride=(), padding=0, ceil_mode=False, include_pad=True, divisor=None,
        dtype="torch.float32", cl=False):
    x = tensor(list(shape), dtype, channels_last(list(shape)) if cl else None)
    return make_task(AVG, [x, list(kernel), list(stride), padding if isinstance(padding, int) else list(padding),
                           ceil_mode, include_pad, divisor])


def max_pool(shape, kernel, stride=(), padding=0, dilation=1, ceil_mode=False, dtype="torch.float32", cl=False):
    x = tensor(list(shape), dtype, channels_last(list(shape)) if cl else None)
    return make_task(MAX, [x, list(kernel), list(stride), padding if isinstance(padding, int) else list(padding),
                           dilation if isinstance(dilation, int) else list(dilation), ceil_mode])


def adaptive(shape, out, dtype="torch.float32", cl=False):
    x = tensor(list(shape), dtype, channels_last(list(shape)) if cl else None)
    return make_task(ADAPTIVE, [x, list(out)])


def facts_of(task):
    facts = pool.match(task)
    assert not isinstance(facts, str), facts
    return facts


def space_of(task, backend):
    return pool.space(facts_of(task), backend, HW)


def start_of(task, backend):
    return pool.start(facts_of(task), backend, HW)


# ---------------------------------------------------------------- what is supported

@pytest.mark.parametrize("size, kernel, stride, pad, ceil_mode", [
    (9, 3, 2, 1, False), (9, 3, 2, 1, True), (10, 3, 2, 0, True), (7, 2, 3, 1, True),
    (5, 5, 1, 2, False), (6, 4, 4, 2, True), (11, 3, 3, 1, True),
])
def test_output_size_follows_aten(size, kernel, stride, pad, ceil_mode):
    y = torch.nn.functional.avg_pool2d(torch.zeros(1, 1, size, size), kernel, stride, pad, ceil_mode)
    assert pool.output_size(size, kernel, stride, pad, ceil_mode) == y.shape[-1]


@pytest.mark.parametrize("size, kernel, stride, pad, dilation, ceil_mode", [
    (9, 3, 2, 1, 2, False), (9, 3, 2, 1, 2, True), (10, 2, 3, 1, 3, True), (11, 3, 1, 0, 4, False),
])
def test_dilated_output_size_follows_aten(size, kernel, stride, pad, dilation, ceil_mode):
    y = torch.nn.functional.max_pool2d(torch.zeros(1, 1, size, size), kernel, stride, pad, dilation, ceil_mode)
    assert pool.output_size(size, kernel, stride, pad, ceil_mode, dilation) == y.shape[-1]


@pytest.mark.parametrize("task, layout, window", [
    (avg((2, 3, 9, 11), (3, 3), (2, 2), 1), "nchw", (3, 3)),
    (avg((3, 8, 8), (2, 2)), "nchw", (2, 2)),  # 3-D input: one image
    (avg((2, 5, 9, 11), (3, 2), (2, 3), (1, 1), cl=True), "nhwc", (3, 2)),
    (adaptive((2, 3, 9, 11), (4, 3)), "nchw", (3, 5)),  # largest windows: rows [2, 5), columns [3, 8)
    (adaptive((2, 5, 10, 10), (5, 5), cl=True), "nhwc", (2, 2)),
    (adaptive((2, 5, 7, 7), (1, 1)), "nchw", (7, 7)),  # a global average pool: the whole plane
    (max_pool((2, 3, 9, 11), (3, 3), (2, 2), 1, 2), "nchw", (3, 3)),
    (max_pool((2, 5, 9, 11), (2, 3), cl=True), "nhwc", (2, 3)),
])
def test_supported_cases(task, layout, window):
    facts = facts_of(task)
    assert facts["layout"] == layout and (facts["kh"], facts["kw"]) == window
    for backend in ("cpu", "triton", "cuda"):
        assert pool.space(facts, backend, HW) is not None


@pytest.mark.parametrize("task, words", [
    (make_task(AVG, [tensor([2, 3, 8, 8], "torch.float64"), [2, 2], [], 0, False, True, None]),
     "avg_pool2d on torch.float64"),
    (make_task(AVG, [tensor([2, 3, 8, 8], stride=[192, 1, 3, 24]), [2, 2], [], 0, False, True, None]),
     "neither contiguous nor channels-last"),
    (make_task("aten::max_pool3d_with_indices.default", [tensor([2, 3, 4, 8, 8]), [2, 2, 2]]),
     "no built-in template for aten::max_pool3d_with_indices.default"),
    (make_task(MAX, [tensor([2, 3, 8, 8], "torch.float64"), [2, 2]]), "max_pool2d_with_indices on torch.float64"),
])
def test_unsupported_cases_say_why(task, words):
    reason = pool.match(task)
    assert isinstance(reason, str) and words in reason, reason


def test_keyword_arguments_are_refused():
    task = avg((2, 3, 8, 8), (2, 2))
    task.args.append({"kwargs": {"divisor_override": 3}})
    assert "keyword arguments" in pool.match(task)


def test_the_pool_family_takes_both_ops():
    for task in (avg((2, 3, 8, 8), (2, 2)), adaptive((2, 3, 8, 8), (3, 3)), max_pool((2, 3, 8, 8), (2, 2))):
        assert family_check.family_for(task)[0].name == "pool"


# ---------------------------------------------------------------- the spaces

RESNET_STEM = avg((32, 256, 56, 56), (3, 3), (2, 2), 1)
SPACE_TASKS = [RESNET_STEM, avg((32, 256, 56, 56), (3, 3), (2, 2), 1, cl=True),
               adaptive((32, 512, 14, 14), (7, 7)), avg((4, 8, 64, 64), (9, 9), (1, 1), 4),
               adaptive((256, 2048, 7, 7), (1, 1), dtype="torch.bfloat16", cl=True),
               max_pool((32, 64, 112, 112), (3, 3), (2, 2), 1)]  # ResNet's stem max pool
SPACE_IDS = ["nchw", "nhwc", "adaptive", "big-window", "global-nhwc-bf16", "max"]


@pytest.mark.parametrize("task", SPACE_TASKS, ids=SPACE_IDS)
@pytest.mark.parametrize("backend", ["cpu", "triton", "cuda"])
def test_every_buildable_point_renders_its_own_source(task, backend):
    facts = facts_of(task)
    points = valid_points(task, backend)
    assert 1 < len(points) <= 400
    sources = [pool.render(facts, backend, p) for p in points]
    assert len(set(sources)) == len(sources)
    assert pool.start(facts, backend, HW) in points
    for source in sources[::5]:
        assert f"kf-op: {task.op}" in source
        assert scan_source(source, LANGUAGE[backend], facts["dtype"]) == []


def test_big_windows_loop_instead_of_unrolling_and_start_on_tiles():
    task = SPACE_TASKS[3]  # 81 window positions
    per_output = [p for p in valid_points(task, "triton") if p["variant"] == "per_output"]
    assert per_output and {p["unroll"] for p in per_output} == {False}
    assert start_of(task, "triton")["variant"] == "window_tile"


def test_max_pooling_scans_windows_in_order_one_output_per_lane():
    # the first of equal maxima wins: a tile reduction would need its own tie rule
    assert set(space_of(SPACE_TASKS[5], "triton").variants) == {"per_output"}
    assert "simd" not in start_of(SPACE_TASKS[5], "cpu")


def test_the_channels_last_cuda_packs_divide_the_channels():
    assert space_of(avg((2, 6, 9, 9), (3, 3), cl=True), "cuda").variants[""].param("vec").values == (1, 2)
    assert space_of(avg((2, 16, 9, 9), (3, 3), dtype="torch.float16", cl=True),
                    "cuda").variants[""].param("vec").values == (1, 2, 4, 8)
    assert space_of(avg((2, 16, 9, 9), (3, 3)), "cuda").variants[""].param("vec").values == (1,)


def test_every_move_has_a_reason():
    for task in SPACE_TASKS:
        for backend in ("cpu", "triton", "cuda"):
            space = space_of(task, backend)
            for point in valid_points(task, backend)[:50]:
                for name, new, _ in space.neighbours(point):
                    assert pool.explain(name, point.get(name), new) != "try a neighbouring value", (name, new)


# ---------------------------------------------------------------- the starting rules

def test_a_large_pool_starts_with_the_measured_blocks():
    # 6.4M outputs: thousands of programs per SM whatever the block.
    assert start_of(RESNET_STEM, "triton") == {"variant": "per_output", "block": 256, "num_warps": 8, "unroll": True}
    assert start_of(SPACE_TASKS[1], "triton") == {"variant": "per_output", "block": 1024, "num_warps": 8,
                                                  "unroll": True}


def test_a_small_pool_starts_with_smaller_blocks_to_fill_the_sms():
    # 2 x 64 x 7 x 7 = 6272 outputs: blocks of 64 give 98 programs, still short of 4 per SM
    task = avg((2, 64, 14, 14), (2, 2))
    assert start_of(task, "triton")["block"] == 64
    assert start_of(task, "cuda")["threads"] == 64
    assert pool.start(facts_of(task), "cuda", Hardware(sms=4))["threads"] == 256  # a small GPU is filled


def test_the_cuda_start_reads_a_full_pack_of_channels():
    task = avg((8, 256, 28, 28), (3, 3), (2, 2), 1, dtype="torch.float16", cl=True)
    assert start_of(task, "cuda")["vec"] == 8  # 16 bytes: 8 halves
    assert start_of(RESNET_STEM, "cuda")["vec"] == 1  # NCHW: one output per thread


def test_the_cpu_start_shares_rows_only_when_planes_are_few():
    assert start_of(RESNET_STEM, "cpu")["parallel"] == "planes"  # 8192 planes
    assert start_of(avg((1, 64, 112, 112), (3, 3), (2, 2), 1, cl=True), "cpu")["parallel"] == "rows"  # 1 image


# ---------------------------------------------------------------- the proposer, end to end

@pytest.mark.parametrize("task", SPACE_TASKS, ids=SPACE_IDS)
@pytest.mark.parametrize("backend", ["cpu", "triton", "cuda"])
def test_proposer_starts_at_the_starting_point_and_never_repeats(task, backend):
    tried = family_check.proposal_chain(task, backend, steps=30, seed=4)
    assert tried[0].params == start_of(task, backend)
    assert len({p.source for p in tried}) == len(tried)  # never the same kernel twice
    space = space_of(task, backend)
    assert all(space.contains(p.params) for p in tried)
    assert len(tried) == min(31, len(valid_points(task, backend)))
