"""Family behaviours that build and run kernels, beyond "this point is correct", which the sweep
(test_sweep.py, on the cases of sweep_cases.py, with family_check's input sets) checks for every
family on every backend: that the checks catch a kernel wrong in a known way, what a kernel must
give where the checks cannot look, tasks that make_task cannot make, and code paths no small
case takes.

The C tests build into one folder for the module (a build is cached by its source there); the
Triton ones share one interpreter process, which checks every Triton source of the module. Run as
a script, this file is that process:

    TRITON_INTERPRET=1 python tests/test_family_kernels.py < variants.json
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
from family_check import channels_last, check_source, family_for, make_task, tensor

from kernforge.backends import cpu
from kernforge.backends.scan import scan_source
from kernforge.propose.builtin import Hardware
from kernforge.records.task import KernelTask

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("family_kernels")]  # one worker: module fixtures made once

F32, BF16 = "torch.float32", "torch.bfloat16"
HW = Hardware()
needs_gcc = pytest.mark.skipif(cpu.unavailable_reason() is not None, reason="gcc is not installed")
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")


@pytest.fixture(scope="module")
def c_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's C sources and builds."""
    return tmp_path_factory.mktemp("family-kernels-c")


def build_c(source: str, task, folder: Path):
    path = folder / f"kernel{len(list(folder.glob('kernel*.c')))}.c"
    path.write_text(source)
    return cpu.build(path, folder / "build", task.outputs)


def render(task, backend: str, point: dict) -> str:
    family, facts = family_for(task)
    return family.render(facts, backend, point)


# ---------------------------------------------------------------- indexed reduce

@needs_gcc
def test_a_kernel_that_breaks_ties_the_other_way_fails(c_build):
    task = make_task("aten::argmax.default", [tensor([5, 37], "torch.bfloat16"), 1])
    source = render(task, "cpu", {"variant": "rows", "schedule": "static"})
    assert "((a) > (b) ||" in source
    last_wins = source.replace("((a) > (b) ||", "((a) >= (b) ||")
    assert check_source(source, "cpu", task, c_build) is None
    why = check_source(last_wins, "cpu", task, c_build, sets=("ties_nan",))
    assert why is not None and "differs from the reference" in why


# -0.0 == 0.0: the first of them is the extreme, and max.dim / min.dim give that element, its sign
# with it (the checks compare values, to which the sign of a zero is no difference)
SIGNED_ZEROS = [[-1.0, -0.0, 0.0, -0.0, -2.0],  # max: -0.0 at 1
                [-1.0, 0.0, -0.0, 0.0, -2.0],  # max: 0.0 at 1
                [1.0, 0.0, -0.0, 0.0, 2.0],  # min: 0.0 at 1
                [1.0, -0.0, 0.0, -0.0, 2.0]]  # min: -0.0 at 1


@needs_gcc
@pytest.mark.parametrize("op", ["aten::max.dim", "aten::min.dim"])
@pytest.mark.parametrize("dtype", ["torch.float32", "torch.bfloat16"])
def test_max_and_min_give_the_zero_at_the_index_with_its_sign(op, dtype, c_build):
    x = torch.tensor(SIGNED_ZEROS, dtype=getattr(torch, dtype[6:]))
    eager = getattr(torch, op.split("::")[1].split(".")[0])
    for dim, view in ((1, x), (0, x.t().contiguous())):  # rows, then columns
        task = make_task(op, [tensor(list(view.shape), dtype), dim])
        family, facts = family_for(task)
        for point in family.space(facts, "cpu", HW).sample(random.Random(0), 4):
            (values, indices), (want, want_indices) = build_c(family.render(facts, "cpu", point), task,
                                                              c_build)(view, dim), eager(view, dim)
            assert torch.equal(indices, want_indices) and torch.equal(values, want), (dim, point)
            assert torch.equal(values.signbit(), want.signbit()), (dim, point, values)


# ---------------------------------------------------------------- cumsum

@needs_gcc
def test_a_float32_running_sum_in_float32_fails_long_rows(c_build):
    """Eager accumulates a float32 cumsum in double: a kernel summing 5000 values in float32
    drifts outside the tolerance."""
    task = make_task("aten::cumsum.default", [tensor([3, 5000]), -1])
    source = render(task, "cpu", {"variant": "rows", "schedule": "static"})
    assert "#define ACC_T double" in source
    assert check_source(source, "cpu", task, c_build) is None
    narrow = source.replace("#define ACC_T double", "#define ACC_T float")
    why = check_source(narrow, "cpu", task, c_build, sets=("normal",))
    assert why is not None and "outside the tolerance" in why


# ---------------------------------------------------------------- batch norm

def cudnn_like_task(saved_shape: list[int], layout: str) -> KernelTask:
    """cudnn_batch_norm in eval mode cannot run on a CPU: its task as CUDA lists it, made by hand."""
    shape = [2, 3, 5, 7]
    x = tensor(shape, F32, channels_last(shape) if layout == "nhwc" else None)
    args = [x, tensor([3]), tensor([3]), tensor([3]), tensor([3], positive=True), False, 0.1, 1e-5]
    outputs = [dict(x), tensor(saved_shape), tensor(saved_shape), tensor([0], "torch.uint8")]
    return KernelTask(task_id="t0", op="aten::cudnn_batch_norm.default", signature="s", args=args, outputs=outputs,
                      samples=[], share=0.5, gain_if_2x=1.33, time_us=10.0, device="cuda")


@needs_gcc
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("saved", [[0], [3]])
def test_cudnn_and_cuda_saved_statistics(layout, saved, c_build):
    # CUDA's native kernels return [C] saved statistics in eval mode (running_mean, 1/sqrt(var+eps));
    # cuDNN returns empty ones and a reserve. Checked against native_batch_norm on the CPU.
    from kernforge.propose.families import batch_norm

    task = cudnn_like_task(saved, layout)
    facts = batch_norm.match(task)
    assert facts["saved"] == math.prod(saved) and facts["reserve"]
    kernel = build_c(batch_norm.render(facts, "cpu", batch_norm.start(facts, "cpu", HW)), task, c_build)
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
    for backend in ("triton", "cuda"):
        source = batch_norm.render(facts, backend, batch_norm.start(facts, backend, HW))
        assert "kf-op: aten::cudnn_batch_norm.default" in source
    assert "RESERVE = True" in batch_norm.render(facts, "triton", batch_norm.start(facts, "triton", HW))


@needs_gcc
@pytest.mark.parametrize("stats", ["two_pass", "one_pass_double"])
def test_batch_statistics_of_large_mean_data(stats, c_build):
    """Values of mean 1000 and spread 1 (a cancellation of 1e6 in E[x^2] - mean^2): the variance
    within 1e-4 of float64's. (Not an input set of family_check's: there the normalised output
    is held to 8x eager's error too, which these kernels exceed at a few elements of such data.)"""
    task = make_task("aten::native_batch_norm.default",
                     [tensor([4, 3, 33, 9]), tensor([3]), tensor([3]), None, None, True, 0.1, 1e-5])
    kernel = build_c(render(task, "cpu", {"schedule": "static", "simd": True, "stats": stats}), task, c_build)
    x = 1000 + torch.randn(4, 3, 33, 9, generator=torch.Generator().manual_seed(0))
    w, b = torch.ones(3), torch.zeros(3)
    y, mean, invstd = kernel(x, w, b, None, None, True, 0.1, 1e-5)
    var = x.double().var(dim=(0, 2, 3), unbiased=False)
    assert torch.allclose(invstd.double(), (var + 1e-5).rsqrt(), rtol=1e-4)
    assert torch.allclose(mean.double(), x.double().mean(dim=(0, 2, 3)), rtol=1e-6)


# ---------------------------------------------------------------- elementwise (Triton)

def int64_variants() -> list[dict]:
    """The element-wise Triton kernels with 64-bit offsets forced (tensors past 2^31 elements take
    them by themselves): each variant, one program a block and a persistent grid."""
    from kernforge.propose.families import elementwise as ew

    variants = []
    for op, args in (("aten::silu.default", [tensor([5, 37], BF16)]),
                     ("aten::add.Tensor", [tensor([3, 300], BF16), tensor([300], BF16)])):  # two column tiles
        facts = {**ew.match(make_task(op, args)), "int64": True}
        space, start = ew.space(facts, "triton", HW), ew.start(facts, "triton", HW)
        for variant in space.variants:
            for programs in (0, 4):
                point = {**start, "variant": variant, "programs_per_sm": programs}
                if variant == "tile2d":
                    point.update(block=256, num_warps=2)  # a few rows a tile, several tiles
                assert space.contains(point), point
                variants.append({"id": f"{op[6:-8]}-{variant}-{programs}", "op": op, "args": args,
                                 "source": ew.render(facts, "triton", point)})
    return variants


def triton_variants() -> list[dict]:
    """Every Triton source this module checks: {"id", "op", "args", "source"}."""
    return int64_variants()


@pytest.fixture(scope="module")
def interpreted() -> dict[str, str | None]:
    """Each Triton source of the module checked in one interpreter process, by its id."""
    return family_check.run_under_interpreter(triton_variants(), script=Path(__file__))


@needs_triton
@pytest.mark.parametrize("variant_id", [v["id"] for v in int64_variants()])
def test_elementwise_triton_kernels_with_64_bit_offsets(variant_id, interpreted):
    source = next(v["source"] for v in int64_variants() if v["id"] == variant_id)
    assert "INT64 = True" in source
    assert scan_source(source, "triton", BF16) == []
    assert interpreted[variant_id] is None, interpreted[variant_id]


def main() -> int:
    """The Triton sources on stdin checked against their ops; the results by id on stdout."""
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for v in json.load(sys.stdin):
            results[v["id"]] = check_source(v["source"], "triton", make_task(v["op"], v["args"]), Path(tmp) / v["id"])
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
