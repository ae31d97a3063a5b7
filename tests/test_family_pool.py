"""The pool family: avg_pool2d and _adaptive_avg_pool2d, contiguous and channels-last.

What it matches (and why not), ATen's output-size rule, every valid point renders to its
own source, every C variant is correct on small odd shapes, every Triton variant class is
correct under the interpreter, and the proposer starts at the initial point and never
repeats itself. A 1x1 adaptive pool is the reduce family's mean over H, W.
"""

from __future__ import annotations

import importlib.util
import itertools

import family_check
import pytest
import torch
from family_check import channels_last, check_source, make_task, tensor

from kernforge.backends import cpu
from kernforge.evaluate.scan import scan_source
from family_check import all_points as _all_points
from kernforge.propose.templates import pool

AVG, ADAPTIVE = pool.AVG, pool.ADAPTIVE
HAVE_TRITON = importlib.util.find_spec("triton") is not None


def avg(shape, kernel, stride=(), padding=0, ceil_mode=False, include_pad=True, divisor=None,
        dtype="torch.float32", cl=False):
    x = tensor(list(shape), dtype, channels_last(list(shape)) if cl else None)
    return make_task(AVG, [x, list(kernel), list(stride), padding if isinstance(padding, int) else list(padding),
                           ceil_mode, include_pad, divisor])


def adaptive(shape, out, dtype="torch.float32", cl=False):
    x = tensor(list(shape), dtype, channels_last(list(shape)) if cl else None)
    return make_task(ADAPTIVE, [x, list(out)])


def valid_points(facts, backend):
    return [p for p in _all_points(pool.space(facts, backend)) if pool.valid(facts, backend, p)]


# ---------------------------------------------------------------- what is supported

@pytest.mark.parametrize("size, kernel, stride, pad, ceil_mode", [
    (9, 3, 2, 1, False), (9, 3, 2, 1, True), (10, 3, 2, 0, True), (7, 2, 3, 1, True),
    (5, 5, 1, 2, False), (6, 4, 4, 2, True), (11, 3, 3, 1, True),
])
def test_output_size_follows_aten(size, kernel, stride, pad, ceil_mode):
    y = torch.nn.functional.avg_pool2d(torch.zeros(1, 1, size, size), kernel, stride, pad, ceil_mode)
    assert pool.output_size(size, kernel, stride, pad, ceil_mode) == y.shape[-1]


@pytest.mark.parametrize("task, layout, window", [
    (avg((2, 3, 9, 11), (3, 3), (2, 2), 1), "nchw", (3, 3)),
    (avg((3, 8, 8), (2, 2)), "nchw", (2, 2)),  # 3-D input: one image
    (avg((2, 5, 9, 11), (3, 2), (2, 3), (1, 1), cl=True), "nhwc", (3, 2)),
    (adaptive((2, 3, 9, 11), (4, 3)), "nchw", (3, 5)),  # largest windows: rows [2, 5), columns [3, 8)
    (adaptive((2, 5, 10, 10), (5, 5), cl=True), "nhwc", (2, 2)),
])
def test_supported_cases(task, layout, window):
    facts = pool.match(task)
    assert not isinstance(facts, str), facts
    assert facts["layout"] == layout and (facts["kh"], facts["kw"]) == window
    for backend in ("cpu", "triton"):
        assert pool.space(facts, backend)


@pytest.mark.parametrize("cl", [False, True])
def test_a_one_by_one_adaptive_pool_is_a_mean_over_hw(cl):
    facts = pool.match(adaptive((2, 5, 7, 7), (1, 1), cl=cl))
    # contiguous: 10 rows of 49; channels-last: 2 images of 49 positions x 5 channels
    expected = (2, 49, 5) if cl else (10, 49, 1)
    assert (facts["reduce"]["outer"], facts["reduce"]["r"], facts["reduce"]["inner"]) == expected
    assert facts["reduce"]["kind"] == "mean"


@pytest.mark.parametrize("task, words", [
    (make_task(AVG, [tensor([2, 3, 8, 8], "torch.float64"), [2, 2], [], 0, False, True, None]),
     "avg_pool2d on torch.float64"),
    (make_task(AVG, [tensor([2, 3, 8, 8], stride=[192, 1, 3, 24]), [2, 2], [], 0, False, True, None]),
     "neither contiguous nor channels-last"),
    (make_task("aten::max_pool2d_with_indices.default", [tensor([2, 3, 8, 8]), [2, 2]]),
     "no built-in template for aten::max_pool2d_with_indices.default"),
])
def test_unsupported_cases_say_why(task, words):
    reason = pool.match(task)
    assert isinstance(reason, str) and words in reason, reason


def test_keyword_arguments_are_refused():
    task = avg((2, 3, 8, 8), (2, 2))
    task.args.append({"kwargs": {"divisor_override": 3}})
    assert "keyword arguments" in pool.match(task)


# ---------------------------------------------------------------- the spaces

SPACE_TASKS = [avg((32, 256, 56, 56), (3, 3), (2, 2), 1), avg((32, 256, 56, 56), (3, 3), (2, 2), 1, cl=True),
               adaptive((32, 512, 14, 14), (7, 7)), avg((4, 8, 64, 64), (9, 9), (1, 1), 4),
               adaptive((256, 2048, 7, 7), (1, 1))]


@pytest.mark.parametrize("task", SPACE_TASKS, ids=["nchw", "nhwc", "adaptive", "big-window", "one-by-one"])
@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_every_valid_point_renders_its_own_source(task, backend):
    facts = pool.match(task)
    points = valid_points(facts, backend)
    assert 1 < len(points) <= 300
    sources = [pool.render(facts, backend, p) for p in points]
    assert len(set(sources)) == len(sources)
    assert pool.initial(facts, backend) in points
    language = "c" if backend == "cpu" else "triton"
    for source in sources[::5]:
        assert f"kf-op: {task.op}" in source
        assert scan_source(source, language, "torch.float32") == []


def test_big_windows_loop_instead_of_unrolling():
    facts = pool.match(SPACE_TASKS[3])  # 81 window positions
    assert {p["window_loop"] for p in valid_points(facts, "triton")} == {"loop"}


def test_every_move_has_a_reason():
    for backend in ("cpu", "triton"):
        for name, values in pool.space(pool.match(SPACE_TASKS[0]), backend).items():
            for old, new in itertools.pairwise(values):
                assert pool.explain(name, old, new) != "try a neighbouring value", name
                assert pool.explain(name, new, old) != "try a neighbouring value", name


# ---------------------------------------------------------------- every C variant is correct

def small_cases(dtype):
    return [
        avg((2, 3, 9, 11), (3, 3), (2, 2), 1, dtype=dtype),
        avg((2, 3, 9, 11), (3, 2), (2, 3), (1, 1), True, False, dtype=dtype),  # ceil, pads excluded
        avg((2, 3, 10, 10), (3, 3), (2, 2), (1, 0), True, True, 5, dtype=dtype),  # divisor_override
        avg((3, 8, 7), (2, 2), dtype=dtype),  # 3-D
        avg((2, 5, 9, 11), (3, 3), (2, 2), 1, True, dtype=dtype, cl=True),
        adaptive((2, 3, 9, 11), (4, 3), dtype=dtype),
        adaptive((2, 5, 9, 11), (4, 5), dtype=dtype, cl=True),
    ]


def c_variants():
    for dtype in ("torch.float32", "torch.bfloat16"):
        for k, task in enumerate(small_cases(dtype)):
            facts = pool.match(task)
            for p in valid_points(facts, "cpu"):
                yield pytest.param(task, p, id=f"{dtype}-case{k}-" + "-".join(str(v) for v in p.values()))
    task = avg((2, 3, 9, 11), (3, 3), (2, 2), 1, dtype="torch.float16")
    yield pytest.param(task, pool.initial(pool.match(task), "cpu"), id="float16-initial")


@pytest.mark.skipif(cpu.unavailable_reason() is not None, reason="gcc is not installed")
@pytest.mark.parametrize("task, params", list(c_variants()))
def test_every_c_variant_is_correct(task, params, tmp_path):
    source = pool.render(pool.match(task), "cpu", params)
    assert check_source(source, "cpu", task, tmp_path) is None


# ---------------------------------------------------------------- Triton, under the interpreter

TRITON_PARAMS = [{"block": 64, "window_loop": "unrolled", "num_warps": 1},
                 {"block": 128, "window_loop": "loop", "num_warps": 2}]


def triton_variants() -> list[dict]:
    variants = []
    for dtype in ("torch.float32", "torch.bfloat16"):
        for k, task in enumerate(small_cases(dtype)):
            for params in TRITON_PARAMS:
                variants.append({"id": f"{dtype}-case{k}-{params['window_loop']}", "op": task.op,
                                 "args": task.args, "params": params})
    return variants


def test_triton_sample_points_are_valid():
    for v in triton_variants():
        facts = pool.match(make_task(v["op"], v["args"]))
        assert pool.valid(facts, "triton", v["params"]), v["id"]


@pytest.fixture(scope="module")
def triton_results() -> dict:
    return family_check.run_under_interpreter(triton_variants())


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("variant_id", [v["id"] for v in triton_variants()])
def test_triton_variant_is_correct_under_the_interpreter(variant_id, triton_results):
    assert triton_results[variant_id] is None, triton_results[variant_id]


# ---------------------------------------------------------------- the proposer, end to end

@pytest.mark.parametrize("task", SPACE_TASKS[:3] + SPACE_TASKS[4:], ids=["nchw", "nhwc", "adaptive", "one-by-one"])
@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_proposer_starts_at_the_initial_point_and_never_repeats(task, backend):
    facts = pool.match(task)
    tried = family_check.proposal_chain(task, backend, steps=30, seed=4)
    first = tried[0]
    assert first.params == pool.initial(facts, backend)
    assert len({p.source for p in tried}) == len(tried)  # never the same kernel twice
    assert all(pool.valid(facts, backend, p.params) for p in tried[1:])
    assert len(tried) == min(31, len(valid_points(facts, backend)))
