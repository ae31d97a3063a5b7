"""builtin/space.py: conditional spaces, their moves and walks, without the product."""

from __future__ import annotations

import random

import pytest

from kernforge.propose.builtin.space import MAX_VISITS, Param, Space, Variant

pytestmark = pytest.mark.unit


def two_variants() -> Space:
    return Space([
        Variant("tile", (Param("rows", (1, 2, 4, 8)), Param("warps", (1, 2, 4, 8))),
                lambda p: p["rows"] * p["warps"] <= 16),
        Variant("loop", (Param("block", (256, 512, 1024)), Param("warps", (1, 2, 4, 8)))),
    ])


def test_a_point_holds_exactly_its_variants_parameters():
    space = two_variants()
    assert space.contains({"variant": "tile", "rows": 2, "warps": 4})
    assert not space.contains({"variant": "tile", "rows": 2, "warps": 4, "block": 256})  # not tile's
    assert not space.contains({"variant": "tile", "rows": 8, "warps": 4})  # 32 > 16: not buildable
    assert not space.contains({"variant": "tile", "rows": 3, "warps": 4})  # out of range
    assert not space.contains({"variant": "other", "rows": 2, "warps": 4})
    assert space.names({"variant": "loop", "block": 256, "warps": 1}) == ["variant", "block", "warps"]


def test_moves_step_numbers_and_switch_variants_keeping_shared_values():
    space = two_variants()
    moves = {(name, value): point for name, value, point in space.neighbours({"variant": "tile", "rows": 2, "warps": 4})}
    assert set(moves) == {("rows", 1), ("rows", 4), ("warps", 2), ("warps", 8), ("variant", "loop")}
    assert moves[("variant", "loop")] == {"variant": "loop", "block": 256, "warps": 4}  # warps kept
    # rows=4, warps=8 would need 32: not a neighbour
    assert ("warps", 8) not in {(n, v) for n, v, _ in space.neighbours({"variant": "tile", "rows": 4, "warps": 4})}


def test_a_switch_into_an_unbuildable_point_lands_on_the_nearest_buildable_one():
    space = Space([Variant("a", (Param("warps", (1, 2, 4, 8, 16)),)),
                   Variant("b", (Param("warps", (1, 2, 4, 8, 16)),), lambda p: p["warps"] <= 4)])
    switch = [point for name, _, point in space.neighbours({"variant": "a", "warps": 16}) if name == "variant"]
    assert switch == [{"variant": "b", "warps": 4}]


def test_named_choices_are_one_move_apart_and_numbers_one_step():
    choice, number = Param("exp", ("libm", "poly", "table")), Param("block", (64, 128, 256, 512))
    assert choice.near("poly") == ["libm", "table"] and choice.steps("libm", "table") == 1
    assert number.near(64) == [128] and number.near(256) == [128, 512] and number.steps(64, 512) == 3
    assert number.closest(300) == 256 and number.closest(5000) == 512


def test_nearest_walks_outward_and_skips_what_is_not_accepted():
    space = Space.single({"a": list(range(10)), "b": list(range(10))})
    start = {"a": 5, "b": 5}
    taken = {space.key(start)} | {space.key(p) for _, _, p in space.neighbours(start)}
    found = space.nearest(start, lambda p: space.key(p) not in taken)
    assert space.distance(start, found) == 2


def test_a_huge_space_is_walked_without_its_product():
    # 20 parameters of 10 values: 1e20 points. A walk that must pass 3 moves out stays small.
    space = Space.single({f"p{i}": list(range(10)) for i in range(20)})
    start = {f"p{i}": 0 for i in range(20)}
    visited = []

    def accept(point):
        visited.append(point)
        return sum(point.values()) >= 3

    found = space.nearest(start, accept)
    assert sum(found.values()) == 3
    assert len(visited) < MAX_VISITS
    assert space.size() == 10 ** 20


def test_nearest_gives_up_after_its_visits():
    space = Space.single({f"p{i}": list(range(10)) for i in range(6)})
    assert space.nearest({f"p{i}": 0 for i in range(6)}, lambda p: False, limit=500) is None


def test_samples_are_buildable_and_distinct():
    space = two_variants()
    points = space.sample(random.Random(0), 100)
    assert all(space.contains(p) for p in points)
    assert len({space.key(p) for p in points}) == len(points)
    # small variants are enumerated whole: tile's 13 buildable points (rows x warps <= 16), loop's 12
    assert sum(p["variant"] == "tile" for p in points) == 13
    assert sum(p["variant"] == "loop" for p in points) == 12


def test_fit_projects_a_point_onto_a_variant():
    space = two_variants()
    assert space.fit({"rows": 3, "warps": 4, "block": 300}, "loop") == {"variant": "loop", "block": 256, "warps": 4}
    assert space.fit({"variant": "tile"}) == {"variant": "tile", "rows": 1, "warps": 1}


def test_legal_keeps_a_buildable_point_and_moves_one_that_is_not():
    space = two_variants()
    assert space.legal({"variant": "tile", "rows": 2, "warps": 4}) == {"variant": "tile", "rows": 2, "warps": 4}
    # out of range here (another shape's space): the closest value in range
    assert space.legal({"variant": "loop", "block": 4096, "warps": 4}) == {"variant": "loop", "block": 1024, "warps": 4}
    # in range but not buildable (8 * 4 > 16): the nearest buildable point of its variant
    unbuildable = {"variant": "tile", "rows": 8, "warps": 4}
    moved = space.legal(unbuildable)
    assert space.contains(moved) and moved["variant"] == "tile" and space.distance(moved, unbuildable) == 1
    # a kind of kernel this space does not have, or another space's parameters: nothing to move to
    assert space.legal({"variant": "split", "block": 256}) is None
    assert space.legal({"variant": "loop", "block": 256, "threads": 128}) is None
    assert Space.single({"block": (64, 128)}).legal({"rows": 2}) is None
