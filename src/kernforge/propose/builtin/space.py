"""A conditional parameter space: variants, each with only the parameters it reads.

A point is a dict: {"variant": name, param: value, ...} holding exactly its variant's
parameters (a space with one unnamed variant has no "variant" key). Each variant says
which of its points can be built (register and shared-memory budgets, the shape's own
limits) with one predicate, written once.

Nothing here enumerates the product of the ranges. A move is one parameter stepped to a
neighbouring value, or a switch to another variant that keeps the values the two share;
the nearest untried point is found by a breadth-first walk over those moves from the
parent, which stops at the first acceptable point or after MAX_VISITS points. The walk
goes through points that cannot be built (a valid point may lie beyond an invalid one)
but never returns one.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

VARIANT = "variant"

# The most points one walk looks at. The walks of every family's space on the shapes of
# tests/test_space.py stay under a few thousand points; this bounds a pathological space.
MAX_VISITS = 20_000
# A variant switch that lands on a point the variant cannot build looks this far for one it can:
# a variant with no buildable point near the parent's values is not a move from there.
SWITCH_VISITS = 500


def _always(point: dict[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class Param:
    """One parameter: its values in order. Numbers and flags step one value at a time; named
    choices (all strings) have no order, so any other one is a single move away."""

    name: str
    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"parameter {self.name} has no values")

    @property
    def ordered(self) -> bool:
        return not all(isinstance(v, str) for v in self.values)

    def index(self, value: Any) -> int:
        return self.values.index(value)

    def near(self, value: Any) -> list[Any]:
        """The values one move from `value` (itself not in range: the nearest in range)."""
        if value not in self.values:
            return [self.closest(value)]
        if not self.ordered:
            return [v for v in self.values if v != value]
        i = self.index(value)
        return [self.values[j] for j in (i - 1, i + 1) if 0 <= j < len(self.values)]

    def steps(self, a: Any, b: Any) -> int:
        if not self.ordered:
            return int(a != b)
        return abs(self.index(a) - self.index(b))

    def closest(self, value: Any) -> Any:
        """The value in range nearest to `value` (numbers by distance, else the first)."""
        if value in self.values:
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool) and self.ordered:
            numbers = [v for v in self.values if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if numbers:
                return min(numbers, key=lambda v: (abs(math.log2(max(v, 1e-9)) - math.log2(max(value, 1e-9)))
                                                   if v > 0 and value > 0 else abs(v - value)))
        return self.values[0]


@dataclass(frozen=True)
class Variant:
    """One kind of kernel: the parameters it reads, and which of its points can be built."""

    name: str
    params: tuple[Param, ...] = ()
    valid: Callable[[dict[str, Any]], bool] = _always

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def size(self) -> int:
        return math.prod(len(p.values) for p in self.params)


class Space:
    def __init__(self, variants: list[Variant] | tuple[Variant, ...]):
        if not variants:
            raise ValueError("a space needs at least one variant")
        self.variants = {v.name: v for v in variants}
        if len(self.variants) != len(variants):
            raise ValueError("two variants share a name")
        # One unnamed variant: points carry no "variant" key.
        self.named = not (len(variants) == 1 and variants[0].name == "")
        # Where a switch into each (variant, projected point) lands: the walk is the costly part of
        # a move, and a search asks for the same switches again and again.
        self._landings: dict[tuple, dict[str, Any] | None] = {}

    @classmethod
    def single(cls, params: dict[str, list[Any]] | list[Param],
               valid: Callable[[dict[str, Any]], bool] = _always) -> Space:
        """A space of one kind of kernel: every point has the same parameters."""
        if isinstance(params, dict):
            params = [Param(name, tuple(values)) for name, values in params.items()]
        return cls([Variant("", tuple(params), valid)])

    # ------------------------------------------------------------ points

    def variant_of(self, point: dict[str, Any]) -> Variant | None:
        if not self.named:
            return self.variants[""]
        return self.variants.get(point.get(VARIANT))

    def names(self, point: dict[str, Any]) -> list[str]:
        """The point's parameters in the space's order, the variant first."""
        variant = self.variant_of(point)
        prefix = [VARIANT] if self.named else []
        return prefix + [p.name for p in variant.params] if variant else []

    def contains(self, point: dict[str, Any]) -> bool:
        """Whether `point` is one of this space's points and can be built."""
        variant = self.variant_of(point)
        if variant is None:
            return False
        expected = {p.name for p in variant.params} | ({VARIANT} if self.named else set())
        if set(point) != expected:
            return False
        if any(point[p.name] not in p.values for p in variant.params):
            return False
        return bool(variant.valid(point))

    def key(self, point: dict[str, Any]) -> tuple:
        """A hashable form of a point (values may be lists: their repr is stable)."""
        return tuple(sorted((k, repr(v)) for k, v in point.items()))

    def fit(self, point: dict[str, Any], variant: str | None = None) -> dict[str, Any]:
        """`point` made a point of `variant` (default: its own): shared values kept where in
        range (else the closest in range), the others at the variant's first value."""
        name = variant if variant is not None else (point.get(VARIANT) if self.named else "")
        target = self.variants[name]
        fitted: dict[str, Any] = {VARIANT: name} if self.named else {}
        for p in target.params:
            fitted[p.name] = p.closest(point[p.name]) if p.name in point else p.values[0]
        return fitted

    def legal(self, point: dict[str, Any]) -> dict[str, Any] | None:
        """`point`, found for another shape, as a buildable point of this space: itself where it is
        one; else fitted (values out of range moved to the closest in range), else the buildable
        point nearest to that; None when its variant is not one of this space's (the shape ruled
        that kind of kernel out), its parameters are not its variant's here (a point of another
        family's space), or nothing buildable is near."""
        variant = self.variant_of(point)
        if variant is None or set(point) - {VARIANT} != {p.name for p in variant.params}:
            return None
        fitted = self.fit(point)
        if self.contains(fitted):
            return fitted
        return self.nearest(fitted, _always)

    def size(self) -> int:
        """How many points the ranges allow, buildable or not (counted, not enumerated)."""
        return sum(v.size() for v in self.variants.values())

    # ------------------------------------------------------------ moves

    def moves(self, point: dict[str, Any]) -> Iterator[tuple[str, Any, dict[str, Any]]]:
        """(parameter, new value, new point) for every point one move away, buildable or not:
        each parameter to a neighbouring value, then each other variant with the shared values."""
        variant = self.variant_of(point)
        if variant is None:
            return
        for p in variant.params:
            for value in p.near(point[p.name]):
                yield p.name, value, {**point, p.name: value}
        if self.named:
            for name in self.variants:
                if name != point[VARIANT]:
                    yield VARIANT, name, self.fit(point, name)

    def neighbours(self, point: dict[str, Any]) -> list[tuple[str, Any, dict[str, Any]]]:
        """The buildable points one move away. A variant switch whose shared values cannot be
        built there lands on that variant's nearest buildable point instead."""
        found = []
        for name, value, moved in self.moves(point):
            if self.contains(moved):
                found.append((name, value, moved))
            elif self.named and name == VARIANT:
                k = self.key(moved)
                if k not in self._landings:
                    self._landings[k] = self.nearest(moved, lambda p: True, within=value, limit=SWITCH_VISITS)
                near = self._landings[k]
                if near is not None:
                    found.append((name, value, near))
        return found

    def nearest(self, start: dict[str, Any], accept: Callable[[dict[str, Any]], bool],
                within: str | None = None, limit: int = MAX_VISITS) -> dict[str, Any] | None:
        """The buildable point nearest to `start` (fewest moves; ties in the space's order)
        that `accept` takes, or None. `within`: stay in that variant."""
        if self.variant_of(start) is None:
            return None
        seen = {self.key(start)}
        queue = deque([start])
        visits = 0
        while queue and visits < limit:
            point = queue.popleft()
            visits += 1
            if self.contains(point) and accept(point):
                return point
            for name, _, moved in self.moves(point):
                if within is not None and self.named and name == VARIANT:
                    continue
                k = self.key(moved)
                if k not in seen:
                    seen.add(k)
                    queue.append(moved)
        return None

    def distance(self, a: dict[str, Any], b: dict[str, Any]) -> int:
        """Moves between two points of one variant (a different variant counts one more)."""
        va, vb = self.variant_of(a), self.variant_of(b)
        if va is None or vb is None:
            return 0
        steps = int(va.name != vb.name)
        for p in vb.params:
            if p.name in a and a[p.name] in p.values:
                steps += p.steps(a[p.name], b[p.name])
            else:
                steps += 1
        return steps

    # ------------------------------------------------------------ sampling (tests, benchmarks)

    def sample(self, rng: random.Random, count: int, tries: int = 200) -> list[dict[str, Any]]:
        """Up to `count` distinct buildable points per variant, drawn at random (every point of a
        small variant)."""
        points: list[dict[str, Any]] = []
        for variant in self.variants.values():
            head = {VARIANT: variant.name} if self.named else {}
            if variant.size() <= count:
                for values in itertools.product(*(p.values for p in variant.params)):
                    point = {**head, **dict(zip((p.name for p in variant.params), values))}
                    if variant.valid(point):
                        points.append(point)
                continue
            chosen: dict[tuple, dict[str, Any]] = {}
            for _ in range(tries):
                point = {**head, **{p.name: rng.choice(p.values) for p in variant.params}}
                if variant.valid(point):
                    chosen.setdefault(self.key(point), point)
                if len(chosen) >= count:
                    break
            points += chosen.values()
        return points
