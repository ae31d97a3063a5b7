"""The reduce family: sum.dim_IntList, mean.dim, amax and amin over any dims.

What it matches (and why not), how the dims map onto [outer, R1, mid, R2, inner], the start
rules on realistic shapes (the middle-dim column reduction splits R to fill the SMs), every
sampled point renders its own source, every variant is correct on odd shapes in every dtype
(C built here, Triton under the interpreter), amax and amin keep a NaN as eager does, and
the proposer starts at the rule's point and never repeats itself. The conformance suite
(test_conformance.py, CASES["reduce"]) samples every variant again on its own cases.

    python test_family_reduce.py triton < variants.json   # the NaN checks, under the interpreter
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
import tempfile
from pathlib import Path

import family_check
import pytest
import torch
from family_check import channels_last, check_source, make_task, tensor

from kernforge.backends import cpu, get_backend
from kernforge.evaluate.scan import scan_source
from kernforge.propose.builtin import Hardware
from kernforge.propose.families import reduce
from kernforge.tasks import KernelTask, resolve_op

pytestmark = pytest.mark.unit

MEAN, SUM, AMAX, AMIN = "aten::mean.dim", "aten::sum.dim_IntList", "aten::amax.default", "aten::amin.default"
OPS = (SUM, MEAN, AMAX, AMIN)
DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")
HAVE_TRITON = importlib.util.find_spec("triton") is not None
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


# ---------------------------------------------------------------- every variant is correct

def dims_cases(rotate: bool = False):
    """Odd shapes reducing the first, a middle, the last, several and two separate blocks of dims;
    per op, each shape in every dtype (`rotate`: in one, the dtypes taken in turn)."""
    n = 0
    for op in OPS:
        for shape, dims, keepdim in (((3, 5, 7), [-1], op != SUM), ((13, 5, 7), [0], False),
                                     ((3, 21, 7), [1], True), ((3, 4, 5, 6), [1, 3], op == MEAN)):
            for dtype in [DTYPES[n % len(DTYPES)]] if rotate else DTYPES:
                yield task_for(op, shape, dims, keepdim, dtype)
            n += 1
    yield task_for(SUM, (2, 3, 4, 5), [0, 2, 3], False)  # several: C and H, W apart
    yield cl_task(MEAN, (2, 37, 3, 5), dtype="torch.bfloat16")  # channels-last over H, W
    yield cl_task(AMAX, (2, 6, 3, 5), (1, 2), False, "torch.float16")  # channels-last over C, H
    yield task_for(AMIN, (3, 2000), [-1])  # few long rows
    yield task_for(SUM, (37, 29), [])  # every dim


def case_id(task) -> str:
    return f"{task.op.split('::')[1]}-{task.args[0]['dtype'][6:]}-{'x'.join(map(str, task.args[0]['shape']))}-" \
           f"{task.args[1]}"


def c_variants():
    for task in dims_cases():
        facts = reduce.match(task)
        for p in sampled(facts, "cpu", count=1):
            yield pytest.param(task, p, id=f"{case_id(task)}-{'-'.join(str(v) for v in p.values())}")


@pytest.mark.workers
@pytest.mark.skipif(cpu.unavailable_reason() is not None, reason="gcc is not installed")
@pytest.mark.parametrize("task, params", list(c_variants()))
def test_every_c_variant_is_correct(task, params, tmp_path):
    source = reduce.render(reduce.match(task), "cpu", params)
    assert check_source(source, "cpu", task, tmp_path) is None


def test_c_variants_cover_every_strategy():
    assert {p.values[1]["variant"] for p in c_variants()} == {"rows", "split_rows", "columns"}


def triton_variants() -> list[dict]:
    """Each shape in one dtype, the dtypes in turn (the interpreter is slow): the start and one
    sampled point of each variant."""
    variants = []
    for task in dims_cases(rotate=True):
        facts = reduce.match(task)
        points = [reduce.start(facts, "triton", HW)] + sampled(facts, "triton", count=1, seed=len(variants))
        for n, p in enumerate(points):
            variants.append({"id": f"{case_id(task)}-{n}-{p['variant']}", "op": task.op, "args": task.args,
                             "params": p})
    return variants


def test_triton_samples_cover_every_variant():
    assert {v["params"]["variant"] for v in triton_variants()} == \
        {"rows", "rows_aligned", "split_rows", "columns", "split_columns", "two_blocks"}


@pytest.fixture(scope="module")
def triton_results() -> dict:
    return family_check.run_under_interpreter(triton_variants())


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("variant_id", [v["id"] for v in triton_variants()])
def test_triton_variant_is_correct_under_the_interpreter(variant_id, triton_results):
    assert triton_results[variant_id] is None, triton_results[variant_id]


# ---------------------------------------------------------------- NaN wins in amax and amin

NAN_TASKS = [task_for(op, shape, dims, False, dtype) for op in (AMAX, AMIN)
             for shape, dims, dtype in (((5, 300), [1], "torch.float32"), ((40, 6), [0], "torch.bfloat16"),
                                        ((3, 4, 5), [0, 2], "torch.float16"), ((2, 3000), [1], "torch.float32"))]


def nan_mismatch(kernel, task) -> str | None:
    """None if the kernel gives eager's result on an input with a NaN in some reductions."""
    positional = family_check.split_kwargs(task.args)[0]
    args = family_check.materialise(positional, torch.Generator().manual_seed(3), 1.0)
    flat = args[0].view(-1)
    flat[7] = float("nan")
    flat[-2] = float("nan")
    expected = getattr(torch, task.op.split("::")[1].split(".")[0])(*args)
    got = kernel(*args)
    if not torch.equal(torch.isnan(got), torch.isnan(expected)):
        return f"NaN at {torch.isnan(got).nonzero().tolist()}, eager's at {torch.isnan(expected).nonzero().tolist()}"
    if not torch.equal(got.nan_to_num(), expected.nan_to_num()):
        return "values differ"
    return None


def build_and_check_nan(task, backend_name: str, params: dict, work: Path) -> str | None:
    backend = get_backend(backend_name)
    path = work / f"nan{len(list(work.glob('nan*')))}{backend.source_suffix}"
    path.write_text(reduce.render(reduce.match(task), backend_name, params))
    return nan_mismatch(backend.build(path, work / "build", task.outputs), task)


def nan_variants(backend: str) -> list[tuple]:
    out = []
    for task in NAN_TASKS:
        facts = reduce.match(task)
        for p in [reduce.start(facts, backend, HW)] + sampled(facts, backend, count=1):
            out.append((f"{case_id(task)}-{'-'.join(str(v) for v in p.values())}", task, p))
    return out


@pytest.mark.workers
@pytest.mark.skipif(cpu.unavailable_reason() is not None, reason="gcc is not installed")
@pytest.mark.parametrize("vid, task, params", nan_variants("cpu"), ids=[v[0] for v in nan_variants("cpu")])
def test_c_amax_amin_keep_a_nan(vid, task, params, tmp_path):
    assert build_and_check_nan(task, "cpu", params, tmp_path) is None


@pytest.fixture(scope="module")
def triton_nan_results() -> dict:
    variants = [{"id": vid, "op": task.op, "args": task.args, "params": p} for vid, task, p in nan_variants("triton")]
    return family_check.run_under_interpreter(variants, script=Path(__file__))


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("vid", [v[0] for v in nan_variants("triton")])
def test_triton_amax_amin_keep_a_nan(vid, triton_nan_results):
    assert triton_nan_results[vid] is None, triton_nan_results[vid]


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


def main(backend_name: str) -> int:
    """The NaN checks of the variants on stdin (run under the interpreter for triton)."""
    variants = json.load(sys.stdin)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for v in variants:
            work = Path(tmp) / v["id"]
            work.mkdir()
            try:
                results[v["id"]] = build_and_check_nan(make_task(v["op"], v["args"]), backend_name, v["params"], work)
            except Exception as e:  # noqa: BLE001 - reported as the variant's failure
                results[v["id"]] = f"{type(e).__name__}: {e}"[:2000]
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
