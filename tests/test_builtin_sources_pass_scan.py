"""Every source the built-in proposer can write passes the evaluator's static scan, and its C
sources the checks of their compiled objects.

The scan rejects a candidate before any worker runs it, so a template that trips a rule
(the resident group norm once allocated its counters with torch.zeros) loses every point
of its space in a search, silently, as "cheat". Checked for every valid point of each
family's space, on the shapes of the families' own interpreter tests, for both backends.
The object checks need a compiler (~0.3 s a source), so they see a sample: per family and
dtype, the first and the last valid cpu point (~40 builds)."""

from __future__ import annotations

import pytest
import test_propose
from family_check import family_for, make_task, valid_points

from kernforge.backends import cpu
from kernforge.backends.native import compile_library
from kernforge.evaluate.scan import scan_source
from kernforge.tasks import KernelTask

MODULES = (test_propose,)


def tasks() -> dict[str, KernelTask]:
    """One task per (op, shape, dtype) among the families' interpreter samples."""
    seen: dict[str, KernelTask] = {}
    for module in MODULES:
        for v in module.triton_variants():
            seen.setdefault(f"{v['op']} {v['args']!r}", make_task(v["op"], v["args"]))
    return seen


TASKS = tasks()


@pytest.mark.parametrize("key", sorted(TASKS), ids=lambda key: key[:90])
def test_every_point_passes_the_scan(key):
    family, facts = family_for(TASKS[key])
    checked = 0
    for backend, language in (("triton", "triton"), ("cpu", "c"), ("cuda", "cuda")):
        for params in valid_points(TASKS[key], backend):
            findings = scan_source(family.render(facts, backend, params), language, facts.get("dtype", "float32"))
            assert not findings, (backend, params, [str(f) for f in findings])
            checked += 1
    assert checked > 0


def object_samples() -> dict[str, str]:
    """'family dtype first|last' -> the cpu source of that valid point, for the first task of
    each family and dtype (the two ends of a space differ most in their variants)."""
    samples: dict[str, str] = {}
    for key in sorted(TASKS):
        family, facts = family_for(TASKS[key])
        name = f"{family.name} {facts.get('dtype', 'float32')}"
        if any(k.startswith(name + " ") for k in samples):
            continue
        points = valid_points(TASKS[key], "cpu")
        for label, params in (("first", points[0]), ("last", points[-1])) if points else ():
            samples[f"{name} {label}"] = family.render(facts, "cpu", params)
    return samples


OBJECT_SAMPLES = object_samples()


@pytest.mark.parametrize("key", sorted(OBJECT_SAMPLES))
def test_cpu_sources_pass_the_object_checks(key, tmp_path):
    source = tmp_path / "candidate.c"
    source.write_text(OBJECT_SAMPLES[key])
    # raises RejectedBuild, naming what the object does, where a template trips a check
    assert compile_library(source, tmp_path / "build", ["gcc", *cpu.CFLAGS, "-lm"], "test").exists()
