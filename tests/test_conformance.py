"""Every family on every backend: a sample of each variant's buildable points renders, passes
the evaluator's static scan, and is correct (the cpu backend built and run here, Triton under
its interpreter; CUDA built by nvcc where it is installed, run on a GPU by the bench scripts).

The sample is per variant (SAMPLE points a backend, drawn with a fixed seed), plus each case's starting
point, so a variant added to a space is checked without a test of its own. A family package
without cases in conformance_cases.py fails here."""

from __future__ import annotations

import importlib
import importlib.util
import random
import shutil

import family_check
import pytest
from sweep_cases import CASES
from family_check import family_for, make_task

from kernforge.evaluate.scan import scan_source
from kernforge.propose.builtin import Hardware
from kernforge.propose.builtin.family import FAMILY_PACKAGES

# Points per variant and case, besides the start. nvcc takes seconds a file, the interpreter
# about one a point: the family tests check every point of their own on chosen shapes.
SAMPLE = {"cpu": 3, "triton": 1, "cuda": 1}
BACKENDS = ("cpu", "triton", "cuda")
LANGUAGE = {"cpu": "c", "triton": "triton", "cuda": "cuda"}
HAVE_TRITON = importlib.util.find_spec("triton") is not None


def points(family_name: str, index: int, backend: str) -> list[dict]:
    """The case's starting point, then SAMPLE points of each variant. CUDA samples only the first
    case of each dtype in a family (nvcc takes seconds a file); the other cases build their start."""
    op, args = CASES[family_name][index]
    family, facts = family_for(make_task(op, args))
    space = family.space(facts, backend, Hardware())
    if space is None:
        return []
    start = space.fit(family.start(facts, backend, Hardware()))
    if backend == "cuda" and index != _first_of_dtype(family_name, index):
        return [start]
    sampled = space.sample(random.Random(index), SAMPLE[backend])
    return [start] + [p for p in sampled if space.key(p) != space.key(start)]


def _first_of_dtype(family_name: str, index: int) -> int:
    def dtype(i: int) -> str:
        return next((a["dtype"] for a in CASES[family_name][i][1] if isinstance(a, dict) and "dtype" in a), "")

    return next(i for i in range(len(CASES[family_name])) if dtype(i) == dtype(index))


def case_ids() -> list[tuple[str, int]]:
    return [(name, i) for name in sorted(CASES) for i in range(len(CASES[name]))]


def label(name: str, index: int) -> str:
    op, args = CASES[name][index]
    shape = next((a["shape"] for a in args if isinstance(a, dict) and "shape" in a), [])
    dtype = next((a["dtype"] for a in args if isinstance(a, dict) and "dtype" in a), "")
    return f"{name}-{index}-{op.split('::')[-1].split('.')[0]}-{'x'.join(map(str, shape))}-{dtype[6:]}"


def test_every_family_package_has_cases():
    # keyed by family name: a package may hold several (row_norm: layer_norm and rms_norm)
    names = {f.name for package in FAMILY_PACKAGES
             for f in importlib.import_module(f"kernforge.propose.families.{package}").FAMILIES}
    assert names - set(CASES) == {"chain"}  # its tasks are captured chains, not (op, args): test_chains.py


@pytest.mark.parametrize("name, index", case_ids(), ids=[label(*c) for c in case_ids()])
def test_starting_points_are_points_of_the_space_and_the_first_move(name, index):
    from kernforge.propose.builtin import BuiltinProposer

    op, args = CASES[name][index]
    task = make_task(op, args)
    family, facts = family_for(task)
    assert family.name.startswith(name) or name.startswith(family.name), (name, family.name)
    covered = 0
    for backend in BACKENDS:
        space = family.space(facts, backend, Hardware())
        if space is None:
            continue
        start = family.start(facts, backend, Hardware())
        assert space.contains(start), (backend, start)
        assert BuiltinProposer().next_move(task, backend, None, []).params == start
        covered += 1
    assert covered >= 2, "a family is searched on at least two backends"


@pytest.mark.parametrize("name, index", case_ids(), ids=[label(*c) for c in case_ids()])
def test_sampled_points_render_and_pass_the_scan(name, index):
    op, args = CASES[name][index]
    family, facts = family_for(make_task(op, args))
    for backend in BACKENDS:
        for point in points(name, index, backend):
            source = family.render(facts, backend, point)
            assert f"kf-op: {op}" in source
            findings = scan_source(source, LANGUAGE[backend], facts.get("dtype", "float32"))
            assert not findings, (backend, point, [str(f) for f in findings])


@pytest.mark.workers
@pytest.mark.parametrize("name, index", case_ids(), ids=[label(*c) for c in case_ids()])
def test_sampled_cpu_points_are_correct(name, index, tmp_path):
    op, args = CASES[name][index]
    task = make_task(op, args)
    for point in points(name, index, "cpu"):
        assert family_check.check_params(task, "cpu", point, tmp_path) is None, point


def triton_samples(family: str) -> list[dict]:
    return [{"id": f"{label(name, index)}-{n}", "op": CASES[name][index][0], "args": CASES[name][index][1],
             "params": point}
            for name, index in case_ids() if name == family
            for n, point in enumerate(points(name, index, "triton"))]


TRITON_SAMPLES = [(name, s["id"]) for name in sorted(CASES) for s in triton_samples(name)]


@pytest.fixture(scope="module")
def triton_results():
    """Each family's samples in one interpreter process of their own, run when the family's
    first sample is asked for (so that -k one family runs that family alone)."""
    cache: dict[str, dict] = {}

    def results(family: str) -> dict:
        if family not in cache:
            cache[family] = family_check.run_under_interpreter(triton_samples(family), timeout_s=1800)
        return cache[family]

    return results


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("family, sample_id", TRITON_SAMPLES, ids=[s for _, s in TRITON_SAMPLES])
def test_sampled_triton_points_are_correct_under_the_interpreter(family, sample_id, triton_results):
    results = triton_results(family)
    assert sample_id in results
    assert results[sample_id] is None, results[sample_id]


@pytest.mark.workers
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("name, index", case_ids(), ids=[label(*c) for c in case_ids()])
def test_sampled_cuda_points_build(name, index, tmp_path):
    from kernforge.backends.cuda import DEFAULT_ARCH, NVCC_FLAGS
    from kernforge.backends.native import compile_library

    op, args = CASES[name][index]
    family, facts = family_for(make_task(op, args))
    for n, point in enumerate(points(name, index, "cuda")):
        source = tmp_path / f"candidate{n}.cu"
        source.write_text(family.render(facts, "cuda", point))
        # raises BuildError with nvcc's words, or RejectedBuild naming what the object does
        assert compile_library(source, tmp_path / "build", ["nvcc", f"-arch={DEFAULT_ARCH}", *NVCC_FLAGS],
                               "test").exists()


def test_every_kernel_file_is_well_formed_and_rendered_by_some_point():
    """No kernel file is dead: each one's code after its constants block is in some sampled render."""
    from importlib import resources

    from kernforge.propose.builtin import kernel_file

    renders = []
    for name, index in case_ids():
        op, args = CASES[name][index]
        family, facts = family_for(make_task(op, args))
        renders += [family.render(facts, backend, p) for backend in BACKENDS for p in points(name, index, backend)]
    for package in set(FAMILY_PACKAGES) - {"chain"}:  # test_chains.py renders and runs the chain kernel file
        folder = resources.files(f"kernforge.propose.families.{package}").joinpath("kernels")
        files = [f for f in folder.iterdir() if f.is_file()]
        assert files, package
        for file in files:
            _, _, tail = kernel_file.split(file.read_text())
            assert "kf-op: " in file.read_text().split(kernel_file.BEGIN)[0], file.name
            assert any(r.endswith(tail) for r in renders), f"{package}/kernels/{file.name} is never rendered"
