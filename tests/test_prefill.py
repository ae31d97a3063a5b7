"""The outputs' prefill (harness/prefill.py): every kind a set allows is wrong at every element of
its oracle, the kind changes from call to call, and the judge names elements that still hold it."""

from __future__ import annotations

import math
import random

import pytest
import torch

from kernforge.evaluate.checks import compare, element_bound
from kernforge.harness.prefill import Prefill, options_for, options_for_sets, unwritten
from kernforge.harness.session import Plan, make_harness

pytestmark = pytest.mark.unit

CPU = torch.device("cpu")


def edge_softmax(dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A softmax oracle with every kind of answer: NaN rows, exact zeros, ones, ordinary values."""
    x = torch.randn(6, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x[0, 3] = math.nan  # a NaN row
    x[1, 2] = math.inf  # inf - inf: a NaN row
    x[2, 5] = -math.inf  # an exact 0
    x[3, :] = -1e300
    x[3, 4] = 0.0  # an exact 1 beside exact zeros
    return torch.softmax(x, -1).to(dtype)


def one_element_holds(oracle: torch.Tensor, dtype: torch.dtype, index: tuple[int, ...], value: float) -> torch.Tensor:
    out = oracle.to(dtype).clone()
    out[index] = value
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_every_kind_a_set_allows_fails_at_every_element_whatever_its_answer(dtype):
    oracle = edge_softmax(torch.float64 if dtype == torch.float32 else torch.float32)
    bound = element_bound(oracle, oracle.to(dtype), dtype)
    options = options_for(oracle, bound, dtype)
    assert set(options) == {"sentinel", "far"}  # the oracle holds NaN: a NaN prefill would pass there
    for kind, value in options.items():
        for index in [(0, 0), (1, 8), (2, 5), (3, 4), (3, 0), (4, 1)]:  # NaN, NaN, 0, 1, 0, ordinary
            out = one_element_holds(oracle, dtype, index, value)
            why, _ = compare([out], [oracle], [bound], [dtype])
            assert why is not None, (kind, value, index, oracle[index])
            assert unwritten(out, oracle, bound, value) == 1


def test_nan_is_allowed_where_the_oracle_has_none_and_far_is_outside_its_range():
    oracle = torch.softmax(torch.randn(4, 8, dtype=torch.float64), -1)
    options = options_for(oracle, element_bound(oracle, oracle, torch.float32), torch.float32)
    assert math.isnan(options["nan"]) and options["sentinel"] == 12345.0
    assert options["far"] > 2.0  # softmax is in [0, 1]
    # an oracle that holds the sentinel itself: that kind is not offered there
    holds = torch.full((3,), 12345.0, dtype=torch.float64)
    assert "sentinel" not in options_for(holds, element_bound(holds, holds, torch.float32), torch.float32)


def test_integer_and_bool_outputs_get_values_outside_what_the_oracle_holds():
    indices = torch.tensor([0, 3, 49, 12])
    options = options_for(indices, None, torch.int64)
    assert options == {"sentinel": 12345, "far": 98}  # past the range by its width
    for value in options.values():
        out = indices.clone()
        out[2] = value
        assert compare([out], [indices], [None], [torch.int64])[0] is not None
    flags = torch.tensor([True, False, True])
    options = options_for(flags, None, torch.bool)
    assert set(options) == {"sentinel", "far"}
    out = flags.clone()
    out.view(torch.uint8)[0] = options["far"]  # read by torch as True, the right answer there
    assert compare([out], [flags], [None], [torch.bool])[0] is not None
    assert unwritten(out, flags, None, options["far"]) == 1


def test_the_kind_changes_from_call_to_call_and_respects_each_set():
    free = torch.softmax(torch.randn(4, 8, dtype=torch.float64), -1)
    nans = edge_softmax()
    oracles = [[free, torch.tensor([0, 7])], [nans, torch.tensor([1, 2])]]
    bounds = [[element_bound(o[0], o[0], torch.float32), None] for o in oracles]
    options = options_for_sets(oracles, bounds, [torch.float32, torch.int64])
    metas = [{"shape": [4, 8], "stride": [8, 1], "dtype": "torch.float32", "nbytes": 128},
             {"shape": [2], "stride": [1], "dtype": "torch.int64", "nbytes": 16}]
    prefill, rng = Prefill(metas, options), random.Random(0)
    on_free = [prefill.draw(0, rng) for _ in range(60)]
    assert {"nan" if v[0] != v[0] else v[0] for v in on_free} == {"nan", 12345.0, options[0][0]["far"]}
    assert {v[1] for v in on_free} == {12345, 14}
    on_nans = [prefill.draw(1, rng) for _ in range(60)]
    assert not any(math.isnan(v[0]) for v in on_nans)  # the set's oracle has NaN


def test_a_native_outputs_are_prefilled_before_every_call_with_the_value_the_call_records():
    metas = [{"shape": [3, 8], "stride": [8, 1], "dtype": "torch.float32", "nbytes": 96}]
    held = []

    def leaves_it(args, kwargs, outputs):  # writes nothing: what it returns is the prefill
        held.append(outputs[0].clone())
        return outputs[0]

    sets = [([torch.randn(3, 8)], {}) for _ in range(3)]
    plan = Plan(sets=sets, timing=[0, 1, 2], checks=[0, 1, 2], calls=30, judged_timed=3)
    pool = [torch.zeros(3, 8)]
    result = make_harness(CPU)(leaves_it, plan, lambda: pool, Prefill(metas), 7, name="candidate")
    assert result.failure is None
    kinds = {"nan" if math.isnan(v) else v for call in result.judged for v in call.prefill}
    assert len(kinds) >= 2  # not one fixed value
    for call in result.judged:
        (value,) = call.prefill
        (out,) = call.outputs
        assert torch.isnan(out).all() if math.isnan(value) else (out == value).all()
    assert all(not (h == 0).any() for h in held)  # no call found the zeros it was made with
