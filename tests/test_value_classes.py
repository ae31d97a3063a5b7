"""Fresh sets drawn from value classes (evaluate/classes.py) and the model's alignment kept in
every copy and draw (harness/serialize.py: layout_copy, strided_like). Starts nothing."""

from __future__ import annotations

import torch

from kernforge.harness.serialize import Placeholder, layout_copy
from kernforge.evaluate.classes import class_sets, reference_accepts
from kernforge.harness.inputs import draw_placeholder, fresh_set, make_sets, permuted_set

import pytest

pytestmark = pytest.mark.unit


def _accepts(op):
    return reference_accepts(lambda s: [op(*s[0], **s[1])],
                             lambda s: [op(*[a.double() if a.is_floating_point() else a for a in s[0]], **s[1])])


def _softmax_sets(seed: int = 1):
    x = torch.randn(4, 10, 16)
    op = lambda x: torch.softmax(x, -1)  # noqa: E731
    return dict(class_sets(([x], {}), torch.Generator().manual_seed(seed), _accepts(op)))


def test_a_softmax_gets_every_class_in_three_sets():
    sets = _softmax_sets()
    assert list(sets) == ["fresh-classes", "fresh-edges"]
    rows = sets["fresh-classes"][0][0].reshape(-1, 16)
    assert any(bool((r == 0).all()) for r in rows)  # a zero row
    assert any(bool((r == 0).any()) and not bool((r == 0).all()) for r in rows)  # exact zeros among others
    assert any(bool((r == r[0]).all()) and r[0] != 0 for r in rows)  # a constant row
    assert any(bool((r < 0).all()) for r in rows) and any(bool((r > 0).all()) for r in rows)
    assert any(len(r.unique()) < len(r) // 2 for r in rows)  # ties
    tiny = torch.finfo(torch.float32).smallest_normal
    assert any(bool(((r != 0) & (r.abs() < tiny)).all()) for r in rows)  # subnormals
    big = sets["fresh-edges"][0][0]
    finite = big[big.isfinite()]
    assert float(finite.max()) >= torch.finfo(torch.float32).max / 2
    assert float(finite.min()) <= -torch.finfo(torch.float32).max / 2
    special = sets["fresh-edges"][0][0]
    assert bool(special.isnan().any()) and bool((special == float("inf")).any()) \
        and bool((special == float("-inf")).any())


def test_class_sets_differ_from_seed_to_seed():
    a, b = _softmax_sets(1), _softmax_sets(2)
    assert not torch.equal(a["fresh-classes"][0][0], b["fresh-classes"][0][0])


def test_extremes_step_down_where_eager_cannot_take_them():
    # float32 layer norm at 3e38: the variance overflows in eager (inf/NaN) where float64 is finite
    op = lambda x: torch.nn.functional.layer_norm(x, (16,))  # noqa: E731
    sets = dict(class_sets(([torch.randn(8, 16)], {}), torch.Generator().manual_seed(0), _accepts(op)))
    edges = [label for label in sets if label.startswith(("fresh-edges", "fresh-extremes"))]
    assert edges and edges[0].startswith("fresh-edges-max^"), list(sets)


def test_extremes_alone_where_the_reference_refuses_non_finite_values():
    def op(x):
        if not bool(torch.isfinite(x).all()):
            raise RuntimeError("non-finite input")
        return torch.softmax(x, -1)
    sets = dict(class_sets(([torch.randn(8, 16)], {}), torch.Generator().manual_seed(0), _accepts(op)))
    assert list(sets) == ["fresh-classes", "fresh-extremes"]


def test_a_class_the_reference_refuses_is_skipped_for_that_tensor_only():
    def op(x, w):  # refuses a non-finite weight, as an op may raise on values its domain lacks
        if not bool(torch.isfinite(w).all()):
            raise RuntimeError("non-finite weight")
        return x * w
    x, w = torch.randn(6, 8), torch.randn(6, 8)
    sets = dict(class_sets(([x, w], {}), torch.Generator().manual_seed(0), _accepts(op)))
    (sx, sw), _ = sets["fresh-edges"]
    assert bool(sx.isnan().any())  # x still carries NaN and infinities
    assert torch.equal(sw, w)  # w keeps the sample's values


def test_integer_tensors_keep_their_values():
    index = torch.randint(0, 8, (4, 5))
    op = lambda x, i: torch.gather(x, 1, i)  # noqa: E731
    sets = class_sets(([torch.randn(4, 8), index], {}), torch.Generator().manual_seed(0), _accepts(op))
    assert sets and all(torch.equal(s[0][1], index) for _, s in sets)


def test_a_misaligned_view_stays_misaligned_in_every_copy_and_draw():
    base = torch.randn(1 + 4 * 16)
    x = base[1:].view(4, 16)  # contiguous, 4 bytes past a 64-byte boundary
    copies = [layout_copy(x), fresh_set(([x], {}), "normal", torch.Generator())[0][0],
              permuted_set(([x], {}), torch.Generator())[0][0],
              draw_placeholder(Placeholder.of(x), torch.Generator())]
    copies += [s[0][0] for s in make_sets([([x], {})], 0)[0]]
    for c in copies:
        assert c.stride() == x.stride() and c.shape == x.shape
        assert c.storage_offset() == 1 and c.data_ptr() % 16 == 4
    assert torch.equal(layout_copy(x), x)
