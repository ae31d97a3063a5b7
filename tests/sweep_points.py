"""Which kernel points the sweep builds and checks, for every family on every backend.

The families come from the proposer's registry (builtin/family.FAMILY_PACKAGES), their tasks from
sweep_cases.CASES, the backends from kernforge.backends.REGISTRY. Two samples:

- default (every run of the suite): each case's starting point on each backend, the point a
  search builds first; then one point of every other variant of the case's space: the starting
  point moved into it, where buildable, else one drawn with a seed fixed by the case; on cpu
  and cuda also a drawn point of the starting point's own variant. nvcc takes ~1.6 s a file on a 2-core machine against
  ~0.15 s for a gcc build and check of a sweep case, so CUDA builds only the first case of each
  dtype of a family (its starting point and a point of every variant); then, on every backend, a
  point of each variant and each kernel file the sample has not reached yet, from the first case
  that reaches it (a variant or a kernel file that only some shapes or ops take); and on cpu a
  point of each parameter value not built yet (every value of every parameter of every variant
  is built at least once), on triton of each value of the short lists (TRITON_VALUE_COVER_MAX).
- exhaustive (`scripts/test.sh --sweep`, pytest's `--sweep`): every buildable point of every
  case, up to EXHAUSTIVE_PER_VARIANT a variant (a random sample of a larger variant; the Triton
  group norm's spaces hold thousands). Hours under the interpreter: use -k to pick a family.

Points that render the same source are checked once.
"""

from __future__ import annotations

import functools
import importlib
import random
from dataclasses import dataclass
from typing import Any

from family_check import family_for, make_task
from sweep_cases import CASES

from kernforge.backends import REGISTRY
from kernforge.propose.builtin import Hardware
from kernforge.propose.builtin.family import FAMILY_PACKAGES

BACKENDS = tuple(REGISTRY)
LANGUAGE = {"cpu": "c", "triton": "triton", "cuda": "cuda"}
EXHAUSTIVE_PER_VARIANT = 100_000
# Under the interpreter every value of a parameter of at most this many values (a flag, a choice
# of algorithm, a lead of 1, 2 or 4) is built; the tile sizes and warp counts of longer lists
# (261 more points, ~150 s on a loaded 2-core machine) are the exhaustive sweep's.
TRITON_VALUE_COVER_MAX = 3


@dataclass(frozen=True)
class SweepPoint:
    family: str
    index: int  # the case's index in CASES[family]
    backend: str
    params: dict[str, Any]
    why: str  # "start" or "variant NAME" or "exhaustive"

    @property
    def case(self) -> tuple[str, list[Any]]:
        return CASES[self.family][self.index]

    @property
    def test_id(self) -> str:
        values = "-".join(str(v) for v in self.params.values())
        return f"{self.backend}-{case_label(self.family, self.index)}-{values}"

    def variant(self) -> dict[str, Any]:
        """The point in family_check's variant form (run_under_interpreter, InterpreterChecker)."""
        op, args = self.case
        return {"id": self.test_id, "op": op, "args": args, "params": self.params}


def _first_tensors(args: list[Any], key: str, default: Any) -> Any:
    """`key` ("shape", "dtype") of a case's first tensor argument."""
    return next((a[key] for a in args if isinstance(a, dict) and key in a), default)


def case_label(name: str, index: int) -> str:
    op, args = CASES[name][index]
    shape, dtype = _first_tensors(args, "shape", []), _first_tensors(args, "dtype", "")
    return f"{name}-{index}-{op.split('::')[-1].split('.')[0]}-{'x'.join(map(str, shape))}-{dtype[6:]}"


def case_ids() -> list[tuple[str, int]]:
    return [(name, i) for name in sorted(CASES) for i in range(len(CASES[name]))]


@functools.cache
def _case(name: str, index: int):
    """(task, family, facts) of a case; made once (each draws its example tensors)."""
    task = make_task(*CASES[name][index])
    family, facts = family_for(task)
    return task, family, facts


def task_of(name: str, index: int):
    return _case(name, index)[0]


def facts_of(name: str, index: int) -> dict[str, Any]:
    return _case(name, index)[2]


@functools.cache  # asked for every point the sample weighs, at every collection
def space_and_start(name: str, index: int, backend: str):
    """The case's space on `backend` and its starting point, or (None, None) where the family has
    no kernels for that backend. Shared: read it, never change the point."""
    _, family, facts = _case(name, index)
    space = family.space(facts, backend, Hardware())
    if space is None:
        return None, None
    return space, space.fit(family.start(facts, backend, Hardware()))


def render(point: SweepPoint) -> str:
    _, family, facts = _case(point.family, point.index)
    return family.render(facts, point.backend, point.params)


def _first_of_dtype(name: str, index: int) -> bool:
    def dtype(i: int) -> str:
        return _first_tensors(CASES[name][i][1], "dtype", "")

    return index == next(i for i in range(len(CASES[name])) if dtype(i) == dtype(index))


def case_points(name: str, index: int, backend: str, exhaustive: bool = False) -> list[SweepPoint]:
    """The points of one case on one backend that the sweep checks (see the module's docstring)."""
    space, start = space_and_start(name, index, backend)
    if space is None:
        return []
    if exhaustive:
        drawn = space.sample(random.Random(index), EXHAUSTIVE_PER_VARIANT)
        return [SweepPoint(name, index, backend, p, "exhaustive") for p in drawn]
    if backend == "cuda" and not _first_of_dtype(name, index):
        return []
    points = [SweepPoint(name, index, backend, start, "start")]
    drawn = {p.get("variant", ""): p for p in space.sample(random.Random(f"{name}-{backend}-{index}"), 1)}
    for variant in space.variants:
        # the starting point moved into the variant, as a search's switch of variant lands, where
        # that is buildable; else a drawn point of it
        fitted = space.fit(start, variant)
        p = fitted if space.contains(fitted) else drawn.get(variant)
        if p is not None and space.key(p) != space.key(start):
            points.append(SweepPoint(name, index, backend, p, f"variant {variant}".strip()))
    own = drawn.get(start.get("variant", ""))
    if backend != "triton" and own is not None and space.key(own) != space.key(start):
        # a drawn point of the start's own variant too, where a point is cheap (a gcc build and
        # run, an nvcc build): under the interpreter a drawn point on a large case can take a minute
        points.append(SweepPoint(name, index, backend, own, "drawn"))
    return points


def kernel_file_tails(family: str, backend: str) -> dict[str, str]:
    """The family's kernel files for `backend` (by file name): the code after each one's constants
    block, which a render of it ends with."""
    from importlib import resources

    from kernforge.propose.builtin import kernel_file

    package = next(p for p in FAMILY_PACKAGES
                   if family in {f.name for f in importlib.import_module(f"kernforge.propose.families.{p}").FAMILIES})
    module = f"kernforge.propose.families.{package}"
    suffix = {"cpu": ".c", "triton": ".py", "cuda": ".cu"}[backend]
    return {f.name: kernel_file.split(kernel_file.read(module, f.name))[2]
            for f in resources.files(module).joinpath("kernels").iterdir()
            if f.is_file() and f.name.endswith(suffix) and not f.name.startswith(kernel_file.SHARED)}


def _what_is_missing(backend: str, chosen: list[SweepPoint]) -> list[SweepPoint]:
    """A point of each variant and of each kernel file that no chosen point reaches, from the first
    case whose starting point or sampled points reach it."""
    reached = {(p.family, p.params.get("variant", "")) for p in chosen}
    renders: dict[str, list[str]] = {}
    for p in chosen:
        renders.setdefault(p.family, []).append(render(p))
    files = {name: kernel_file_tails(name, backend) for name in CASES}
    unrendered = {(name, file) for name, tails in files.items() for file, tail in tails.items()
                  if not any(r.endswith(tail) for r in renders.get(name, []))}
    added = []
    for name, index in case_ids():
        space, start = space_and_start(name, index, backend)
        if space is None:
            continue
        for p in [start, *space.sample(random.Random(f"{name}-{backend}-{index}"), 1)]:
            variant = p.get("variant", "")
            source = None
            new_files = set()
            if any(n == name for n, _ in unrendered):
                source = render(SweepPoint(name, index, backend, p, ""))
                new_files = {(name, file) for n, file in unrendered if n == name and source.endswith(files[name][file])}
            if (name, variant) in reached and not new_files:
                continue
            why = f"variant {variant}".strip() if (name, variant) not in reached else ""
            added.append(SweepPoint(name, index, backend, p, why or f"kernel file {sorted(new_files)[0][1]}"))
            reached.add((name, variant))
            unrendered -= new_files
    return added


def _case_elements(case: tuple[str, int]) -> int:
    import math

    _, args = CASES[case[0]][case[1]]
    return sum(math.prod(a["shape"]) for a in args if isinstance(a, dict) and "shape" in a)


def _values_of(point: SweepPoint) -> set[tuple]:
    space, _ = space_and_start(point.family, point.index, point.backend)
    variant = space.variant_of(point.params)
    return {(point.family, variant.name, p.name, repr(point.params[p.name])) for p in variant.params}


def _unbuilt_values(backend: str, chosen: list[SweepPoint]) -> list[SweepPoint]:
    """For each value of each parameter of each variant that no chosen point has, the first point
    found that has it: the starting point (or a drawn point) of the first case where it is
    buildable, with that one value changed."""
    covered = set().union(*(_values_of(p) for p in chosen)) if chosen else set()
    added = []
    # the smallest case first: under the interpreter a point costs about its loop trips, and an
    # extreme value (a block of 8) on a case of 10,000 elements took ~50 s
    for name, index in sorted(case_ids(), key=_case_elements):
        space, start = space_and_start(name, index, backend)
        if space is None:
            continue
        drawn = space.sample(random.Random(f"{name}-{backend}-{index}-values"), 40)
        for variant in space.variants.values():
            bases = [space.fit(start, variant.name)] + [p for p in drawn if space.variant_of(p) is variant]
            for param in variant.params:
                if backend == "triton" and len(param.values) > TRITON_VALUE_COVER_MAX:
                    continue
                for value in param.values:
                    if (name, variant.name, param.name, repr(value)) in covered:
                        continue
                    point = next((q for q in ({**b, param.name: value} for b in bases) if space.contains(q)), None)
                    if point is None:
                        continue
                    sweep_point = SweepPoint(name, index, backend, point, f"{param.name}={value!r}")
                    added.append(sweep_point)
                    covered |= _values_of(sweep_point)
    return added


@functools.cache  # the tests' collection and test_families.py ask for it several times
def sweep_points(backend: str, exhaustive: bool = False) -> tuple[SweepPoint, ...]:
    """Every point the sweep checks on `backend`, one per distinct source."""
    seen: set[str] = set()
    chosen = []
    for name, index in case_ids():
        for point in case_points(name, index, backend, exhaustive):
            source = render(point)
            if source not in seen:
                seen.add(source)
                chosen.append(point)
    if exhaustive:
        return tuple(chosen)
    chosen += _what_is_missing(backend, chosen)
    # every parameter value built once on cpu (a few points); on triton the short lists'
    # (TRITON_VALUE_COVER_MAX); CUDA would need ~55 more nvcc builds (~90 s): --sweep's
    return tuple(chosen if backend == "cuda" else chosen + _unbuilt_values(backend, chosen))
