"""The sweep: every built-in family on every backend, built and checked against the ATen op on
the cases of sweep_cases.py (the cpu backend built by gcc and run here, Triton run under its
interpreter, CUDA built by nvcc where it is installed and run on a GPU by the bench scripts).

Which points: sweep_points.py (by default each case's starting point and a point of every
variant; every point with `--sweep`). The acceptance rule is family_check's, the pipeline's own.
test_families.py checks, without building, that the default sample reaches every variant and
every kernel file.
"""

from __future__ import annotations

import importlib.util
import shutil

import family_check
import pytest
from sweep_points import render, sweep_points, task_of

from kernforge.backends import cpu

pytestmark = pytest.mark.sweep

HAVE_TRITON = importlib.util.find_spec("triton") is not None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "point" in metafunc.fixturenames:
        backend = metafunc.function.__name__.split("_")[1]  # test_<backend>_...
        points = sweep_points(backend, exhaustive=metafunc.config.getoption("sweep"))
        metafunc.parametrize("point", points, ids=[p.test_id for p in points])


@pytest.fixture(scope="session")
def interpreter(tmp_path_factory: pytest.TempPathFactory):
    """One interpreter process for this pytest process's Triton points."""
    checker = family_check.InterpreterChecker(tmp_path_factory.mktemp("interpreter"))
    yield checker
    checker.close()


@pytest.mark.skipif(cpu.unavailable_reason() is not None, reason="gcc is not installed")
def test_cpu_point_is_correct(point, build_cache, tmp_path):
    task = task_of(point.family, point.index)
    why = family_check.check_source(render(point), "cpu", task, tmp_path, build_dir=build_cache / "cpu")
    assert why is None, point.why


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed")
def test_triton_point_is_correct_under_the_interpreter(point, interpreter):
    assert interpreter.check(point.variant()) is None, point.why


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cuda_point_builds(point, build_cache, tmp_path):
    from kernforge.backends.cuda import DEFAULT_ARCH, NVCC_FLAGS
    from kernforge.backends.native import compile_library

    source = tmp_path / "candidate.cu"
    source.write_text(render(point))
    # raises BuildError with nvcc's words, or RejectedBuild naming what the object does
    assert compile_library(source, build_cache / "cuda", ["nvcc", f"-arch={DEFAULT_ARCH}", *NVCC_FLAGS],
                           "test").exists()
