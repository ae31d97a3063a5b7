"""Every built-in family, without building anything: its cases' starting points are points of its
spaces and the proposer's first move, the sweep's sample renders and passes the static scan, and
the sample reaches every variant of every space and every kernel file (test_sweep.py builds and
runs that sample)."""

from __future__ import annotations

import importlib
from importlib import resources

import pytest
from sweep_cases import CASES
from sweep_points import (BACKENDS, LANGUAGE, case_ids, case_label, case_points, facts_of, render,
                          space_and_start, sweep_points, task_of)

from kernforge.backends.scan import scan_source
from kernforge.propose.builtin import BuiltinProposer, kernel_file
from kernforge.propose.builtin.family import FAMILY_PACKAGES

pytestmark = pytest.mark.unit


def test_every_family_has_cases():
    # keyed by family name: a package may hold several (row_norm: layer_norm and rms_norm)
    names = {f.name for package in FAMILY_PACKAGES
             for f in importlib.import_module(f"kernforge.propose.families.{package}").FAMILIES}
    assert names - set(CASES) == {"chain"}  # its tasks are captured chains, not (op, args): test_chains.py


@pytest.mark.parametrize("name, index", case_ids(), ids=[case_label(*c) for c in case_ids()])
def test_starting_points_are_points_of_the_space_and_the_first_move(name, index):
    task = task_of(name, index)
    covered = 0
    for backend in BACKENDS:
        space, start = space_and_start(name, index, backend)
        if space is None:
            continue
        assert space.contains(start), (backend, start)
        assert BuiltinProposer().next_move(task, backend, None, []).params == start
        covered += 1
    assert covered >= 2, "a family is searched on at least two backends"


@pytest.mark.parametrize("name, index", case_ids(), ids=[case_label(*c) for c in case_ids()])
def test_the_sample_renders_and_passes_the_scan(name, index):
    op, _ = CASES[name][index]
    dtype = facts_of(name, index).get("dtype", "float32")
    for backend in BACKENDS:
        for point in case_points(name, index, backend):
            source = render(point)
            assert f"kf-op: {op}" in source
            findings = scan_source(source, LANGUAGE[backend], dtype)
            assert not findings, (backend, point.params, [str(f) for f in findings])


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_default_sample_builds_every_variant_of_every_family(backend):
    """Each variant any case's space has on `backend` is among the points the sweep builds."""
    built = {(p.family, p.params.get("variant", "")) for p in sweep_points(backend)}
    for name, index in case_ids():
        space, _ = space_and_start(name, index, backend)
        for variant in (space.variants if space else ()):
            assert (name, variant) in built, f"{name} variant {variant!r} on {backend} is never built"


def test_every_kernel_file_is_rendered_by_the_default_sample():
    """No kernel file is dead: each one's code after its constants block is in a sampled render, and
    each shared part in one."""
    renders = [render(p) for backend in BACKENDS for p in sweep_points(backend)]
    for package in set(FAMILY_PACKAGES) - {"chain"}:  # test_chains.py renders and runs the chain kernel file
        folder = resources.files(f"kernforge.propose.families.{package}").joinpath("kernels")
        files = [f.name for f in folder.iterdir() if f.is_file() and not f.name.startswith(kernel_file.SHARED)]
        assert files, package
        for name in files:
            text = kernel_file.read(f"kernforge.propose.families.{package}", name)
            _, _, tail = kernel_file.split(text)
            assert "kf-op: " in text.split(kernel_file.BEGIN)[0], name
            assert any(r.endswith(tail) for r in renders), f"{package}/kernels/{name} is never rendered"
        for part in folder.iterdir():
            if part.name.startswith(kernel_file.SHARED):
                assert any(part.read_text() in r for r in renders), f"{package}/kernels/{part.name} is never included"
