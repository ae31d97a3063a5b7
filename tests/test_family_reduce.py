"""The reduce family: sum.dim_IntList, mean.dim and amax over dims adjacent in memory.

What it matches (and why not), every valid point renders to its own source, every C
variant is correct on small odd shapes, a covering sample of Triton variants is
correct under the interpreter, and the proposer starts at the initial point and
never repeats itself.
"""

from __future__ import annotations

import importlib.util
import itertools
import math

import family_check
import pytest
from family_check import channels_last, check_source, make_task, tensor

from kernforge.backends import cpu
from kernforge.evaluate.scan import scan_source
from family_check import all_points as _all_points
from kernforge.propose.templates import reduce

MEAN, SUM, AMAX = "aten::mean.dim", "aten::sum.dim_IntList", "aten::amax.default"
OPS = (SUM, MEAN, AMAX)
HAVE_TRITON = importlib.util.find_spec("triton") is not None


def task_for(op: str, shape, dims, keepdim=False, dtype="torch.float32", stride=None, kwargs=None):
    args = [tensor(list(shape), dtype, stride), dims, keepdim]
    task = make_task(op, args)
    if kwargs is not None:
        task.args.append({"kwargs": kwargs})
    return task


def cl_task(op: str, shape, dims=(2, 3), keepdim=True, dtype="torch.float32"):
    return task_for(op, shape, list(dims), keepdim, dtype, channels_last(list(shape)))


def valid_points(facts, backend):
    return [p for p in _all_points(reduce.space(facts, backend)) if reduce.valid(facts, backend, p)]


# ---------------------------------------------------------------- what is supported

@pytest.mark.parametrize("task, outer, r, inner", [
    # ResNet-50's adaptive_avg_pool2d 1x1: rows of 49
    (task_for(MEAN, (32, 2048, 7, 7), [-1, -2], True), 32 * 2048, 49, 1),
    # the same on a channels-last input: columns of 2048 channels
    (cl_task(MEAN, (32, 2048, 7, 7), (-1, -2)), 32, 49, 2048),
    (cl_task(SUM, (2, 5, 3, 4), keepdim=False), 2, 12, 5),
    (task_for(AMAX, (4, 6, 8), [1, 2]), 4, 48, 1),
    (task_for(SUM, (4, 6, 8), [], False), 1, 192, 1),  # [] reduces every dim, as ATen does
    (task_for(MEAN, (4, 6, 8), [-1]), 24, 8, 1),
    (task_for(SUM, (4, 1, 8), [0, 1]), 1, 4, 8),  # a size-1 dim between does not matter
    (cl_task(MEAN, (2, 5, 3, 4), (1,)), 24, 5, 1),  # channels-last over C: C is innermost
])
def test_reductions_over_adjacent_dims_view_as_outer_r_inner(task, outer, r, inner):
    facts = reduce.match(task)
    assert not isinstance(facts, str), facts
    assert (facts["outer"], facts["r"], facts["inner"]) == (outer, r, inner)
    assert facts["out_shape"] == task.outputs[0]["shape"]
    assert facts["out_stride"] == task.outputs[0]["stride"]
    for backend in ("cpu", "triton"):
        assert reduce.space(facts, backend)


@pytest.mark.parametrize("task, words", [
    (task_for(SUM, (3, 4), [1], kwargs={"dtype": "torch.float64"}), "dtype= argument"),
    (task_for(SUM, (3, 4), [1], dtype="torch.float64"), "sum on torch.float64"),
    (task_for(MEAN, (3, 4, 5), [0, 2]), "not adjacent in memory"),
    (task_for(AMAX, (3, 4), [1], stride=[8, 2]), "not dense"),
    (cl_task(MEAN, (2, 5, 3, 4), (1, 2)), "not adjacent in memory"),  # C and H: W lies between
    (task_for(SUM, (0, 4), [1]), "empty tensor"),
    (task_for("aten::prod.dim_int", (3, 4), 1), "no built-in template for aten::prod.dim_int"),
])
def test_unsupported_cases_say_why(task, words):
    reason = reduce.match(task)
    assert isinstance(reason, str) and words in reason, reason


def test_an_int_dim_is_a_list_of_one():
    facts = reduce.match(task_for(SUM, (3, 4), 1))
    assert (facts["outer"], facts["r"], facts["inner"]) == (3, 4, 1)


# ---------------------------------------------------------------- the spaces

SPACE_TASKS = [
    task_for(MEAN, (256, 2048, 7, 7), [-1, -2], True),
    cl_task(MEAN, (256, 2048, 7, 7)),
    cl_task(SUM, (1, 256, 64, 64)),
    task_for(SUM, (8, 1 << 20), [-1]),
    task_for(AMAX, (4096, 4096), [-1], dtype="torch.bfloat16"),
    task_for(SUM, (4096, 4096), []),
    task_for(MEAN, (7, 300), [1]),
]


@pytest.mark.parametrize("task", SPACE_TASKS, ids=lambda t: f"{t.op}-{t.args[0]['shape']}")
@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_every_valid_point_renders_its_own_source(task, backend):
    facts = reduce.match(task)
    points = valid_points(facts, backend)
    assert 1 < len(points) <= 1000  # focused: the search has ~50 iterations
    sources = [reduce.render(facts, backend, p) for p in points]
    assert len(set(sources)) == len(sources)
    assert reduce.initial(facts, backend) in points


@pytest.mark.parametrize("task", SPACE_TASKS, ids=lambda t: f"{t.op}-{t.args[0]['shape']}")
def test_the_triton_starting_point_fills_the_sms(task):
    facts = reduce.match(task)
    p = reduce.initial(facts, "triton")
    if facts["inner"] == 1:
        programs = math.ceil(facts["outer"] / p["rows_per_program"]) * p["split"]
    else:
        programs = facts["outer"] * math.ceil(facts["inner"] / p["block_c"]) * p["split"]
    if facts["outer"] * facts["r"] * facts["inner"] >= 8192 * reduce.gpu_sms():  # work enough for every SM
        assert programs >= reduce.gpu_sms() // 2, p
    if facts["outer"] * facts["inner"] >= 64 * reduce.gpu_sms():  # plenty of outputs: no split needed
        assert p["split"] == 1


def test_resnet_pooling_packs_short_rows_with_aligned_loads():
    p = reduce.initial(reduce.match(task_for(MEAN, (256, 2048, 7, 7), [-1, -2], True)), "triton")
    assert p["block_r"] == 64 and p["rows_per_program"] >= 16  # a tile of many whole rows of 49
    assert p["loads"] == "aligned"  # 49 floats: 3 rows in 4 start off a 16-byte boundary


def test_packed_lines_of_49_floats_are_4_rows_in_a_256_slot_tile():
    facts = reduce.match(task_for(MEAN, (256, 2048, 7, 7), [-1, -2], True))
    point = {"split": 1, "rows_per_program": 32, "block_r": 256, "loads": "packed", "num_warps": 4,
             "num_stages": 1}
    assert reduce._pack(facts) == 4 and reduce.valid(facts, "triton", point)
    assert not reduce.valid(facts, "triton", point | {"block_r": 128})  # a line of 196 needs 256
    assert not reduce.valid(facts, "triton", point | {"rows_per_program": 30})  # whole lines only
    bf16 = reduce.match(task_for(MEAN, (256, 2048, 7, 7), [-1, -2], True, "torch.bfloat16"))
    assert reduce._pack(bf16) == 8  # 98 bytes a row: 8 rows make 49 vectors


@pytest.mark.parametrize("task", SPACE_TASKS[:4], ids=lambda t: f"{t.op}-{t.args[0]['shape']}")
@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_float32_sources_pass_the_scan(task, backend):
    facts = reduce.match(task)
    language = "c" if backend == "cpu" else "triton"
    for p in valid_points(facts, backend)[::7]:
        source = reduce.render(facts, backend, p)
        assert f"kf-op: {task.op}" in source
        assert scan_source(source, language, "torch.float32") == []


def test_every_move_has_a_reason():
    for name, values in {**reduce.space(reduce.match(SPACE_TASKS[0]), "triton"),
                         **reduce.space(reduce.match(SPACE_TASKS[1]), "triton"),
                         **reduce.space(reduce.match(SPACE_TASKS[0]), "cpu"),
                         **reduce.space(reduce.match(SPACE_TASKS[1]), "cpu")}.items():
        for old, new in itertools.pairwise(values):
            assert reduce.explain(name, old, new) != "try a neighbouring value", name
            assert reduce.explain(name, new, old) != "try a neighbouring value", name


# ---------------------------------------------------------------- every C variant is correct

def c_cases():
    for op in OPS:
        for dtype in ("torch.float32", "torch.bfloat16"):
            yield task_for(op, (3, 5, 7, 7), [-1, -2], True, dtype)  # rows of 49
            yield cl_task(op, (2, 37, 3, 5), keepdim=op != SUM, dtype=dtype)  # columns of 37
    yield task_for(MEAN, (5, 300), [1], False, "torch.float16")
    yield cl_task(MEAN, (2, 37, 3, 5), dtype="torch.float16")
    yield task_for(SUM, (37, 29), [])  # every dim: one row


def c_variants():
    for task in c_cases():
        facts = reduce.match(task)
        for p in valid_points(facts, "cpu"):
            name = "-".join(str(v) for v in p.values())
            yield pytest.param(task, p, id=f"{task.op}-{task.args[0]['dtype']}-{facts['inner']}-{name}")


@pytest.mark.skipif(cpu.unavailable_reason() is not None, reason="gcc is not installed")
@pytest.mark.parametrize("task, params", list(c_variants()))
def test_every_c_variant_is_correct(task, params, tmp_path):
    source = reduce.render(reduce.match(task), "cpu", params)
    assert check_source(source, "cpu", task, tmp_path) is None


def test_c_variants_cover_both_strategies_and_layouts():
    variants = [p.values for p in c_variants()]
    assert {p["strategy"] for _, p in variants if "strategy" in p} == {"rows", "split"}
    assert {p["block_c"] for _, p in variants if "block_c" in p} == {16, 64}


# ---------------------------------------------------------------- Triton, under the interpreter

# (name, task, params): every structural variant of each layout; every point valid for its task.
TRITON_SHAPES = [
    ("rows-packed", lambda op, dt: task_for(op, (6, 5, 7), [-1], False, dt),
     {"split": 1, "rows_per_program": 4, "block_r": 32, "loads": "masked", "num_warps": 1, "num_stages": 1}),
    ("rows-aligned", lambda op, dt: task_for(op, (6, 5, 7), [-1], False, dt),
     {"split": 1, "rows_per_program": 4, "block_r": 32, "loads": "aligned", "num_warps": 1, "num_stages": 1}),
    # 30 rows of 7: lines of 4 fp32 rows (28 values, 112 bytes) or 8 bf16 rows, the last line short
    ("rows-packed-lines", lambda op, dt: task_for(op, (6, 5, 7), [-1], False, dt),
     lambda dt: {"split": 1, "rows_per_program": 8, "block_r": 32 if dt == "torch.float32" else 64,
                 "loads": "packed", "num_warps": 1, "num_stages": 1}),
    ("rows-loop", lambda op, dt: task_for(op, (3, 300), [1], True, dt),
     {"split": 1, "rows_per_program": 1, "block_r": 128, "loads": "masked", "num_warps": 1, "num_stages": 2}),
    ("rows-split", lambda op, dt: task_for(op, (2, 8192), [-1], False, dt),
     {"split": 64, "rows_per_program": 1, "block_r": 128, "loads": "masked", "num_warps": 1, "num_stages": 1}),
    ("all-split-loop", lambda op, dt: task_for(op, (100, 200), [], False, dt),
     {"split": 128, "rows_per_program": 1, "block_r": 128, "loads": "masked", "num_warps": 1,
      "num_stages": 3}),
    ("cols-single", lambda op, dt: cl_task(op, (2, 37, 5, 5), (-1, -2), True, dt),
     {"split": 1, "block_r": 32, "block_c": 16, "num_warps": 4, "num_stages": 1}),
    ("cols-loop", lambda op, dt: cl_task(op, (2, 37, 5, 5), (2, 3), False, dt),
     {"split": 1, "block_r": 8, "block_c": 16, "num_warps": 1, "num_stages": 2}),
    ("cols-split", lambda op, dt: cl_task(op, (1, 20, 32, 32), (2, 3), True, dt),
     {"split": 64, "block_r": 8, "block_c": 16, "num_warps": 1, "num_stages": 3}),
]


def triton_variants() -> list[dict]:
    variants = []
    for op in OPS:
        for dtype in ("torch.float32", "torch.bfloat16"):
            for name, make, params in TRITON_SHAPES:
                task = make(op, dtype)
                variants.append({"id": f"{op}-{dtype}-{name}", "op": op, "args": task.args,
                                 "params": params(dtype) if callable(params) else params})
    return variants


def test_triton_sample_points_are_valid():
    for v in triton_variants():
        facts = reduce.match(make_task(v["op"], v["args"]))
        assert reduce.valid(facts, "triton", v["params"]), v["id"]


@pytest.fixture(scope="module")
def triton_results() -> dict:
    """The sample run under the interpreter, in one fresh process."""
    return family_check.run_under_interpreter(triton_variants())


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("variant_id", [v["id"] for v in triton_variants()])
def test_triton_variant_is_correct_under_the_interpreter(variant_id, triton_results):
    assert triton_results[variant_id] is None, triton_results[variant_id]


# ---------------------------------------------------------------- the proposer, end to end

@pytest.mark.parametrize("task", [SPACE_TASKS[0], SPACE_TASKS[1], SPACE_TASKS[3]],
                         ids=["rows", "channels-last", "long-rows"])
@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_proposer_starts_at_the_initial_point_and_never_repeats(task, backend):
    facts = reduce.match(task)
    tried = family_check.proposal_chain(task, backend, steps=30, seed=2)
    first = tried[0]
    assert first.params == reduce.initial(facts, backend)
    assert first.rationale.startswith("starting point: ")
    assert len({p.source for p in tried}) == len(tried)  # never the same kernel twice
    assert all(reduce.valid(facts, backend, p.params) for p in tried[1:])
    assert len(tried) == min(31, len(valid_points(facts, backend)))
