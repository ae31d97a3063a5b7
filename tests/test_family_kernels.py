"""Family behaviours that build and run kernels, beyond "this point is correct", which the sweep
(test_sweep.py, on the cases of sweep_cases.py, with family_check's input sets) checks for every
family on every backend: that the checks catch a kernel wrong in a known way, what a kernel must
give where the checks cannot look, tasks that make_task cannot make, and code paths no small
case takes.

The C tests build into one folder for the module (a build is cached by its source there).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from family_check import check_source, family_for, make_task, tensor

from kernforge.backends import cpu
from kernforge.propose.builtin import Hardware

pytestmark = pytest.mark.integration

HW = Hardware()
needs_gcc = pytest.mark.skipif(cpu.unavailable_reason() is not None, reason="gcc is not installed")


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
