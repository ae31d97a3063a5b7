"""search/budget.py: --time-budget parsed, a run's time spread over its tasks by their projected
gain and re-spread as they finish, a budgeted task stopped when its share is spent or when it
stopped improving. No worker is started."""

from __future__ import annotations

import re
import time
from types import SimpleNamespace
from typing import Any

import pytest
from helpers import scripted_context

from kernforge.errors import UserError
from kernforge.records.evaluation import EvalResult
from kernforge.records.nodes import Node
from kernforge.records.proposal import Proposal
from kernforge.records.timing import Timing
from kernforge.search import get_strategy
from kernforge.search.budget import (APPLY_MOST_S, APPLY_SHARE, CONFIRM_FACTOR, PLATEAU, FixedCosts, TimeBudget,
                                     candidate_fits, parse_duration, projected_gain, task_bytes)
from kernforge.search.engine import _patience, search_ended

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400),
                                              ("45", 45), (" 1.5h ", 5400), ("2m30s", 150)])
def test_durations_parse(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "30x", "m30", "0", "0m", "30m fast"])
def test_a_bad_duration_is_one_line_that_shows_the_form(text):
    with pytest.raises(UserError, match="like 90s, 30m, 2h|more than nothing"):
        parse_duration(text)


def test_shares_follow_the_projected_gain_and_apply_keeps_its_part():
    budget = TimeBudget.starting(1000.0, started=0.0, apply=True)
    assert budget.reserve_s == APPLY_SHARE * 1000.0
    left = 1000.0 - budget.reserve_s
    weights = [projected_gain(1.3), projected_gain(1.1), projected_gain(1.1)]  # 0.3, 0.1, 0.1
    assert budget.share_s(weights, now=0.0) == pytest.approx(left * 0.6)
    # the first task took less than its share: the rest is spread over the two left, by weight
    assert budget.share_s(weights[1:], now=300.0) == pytest.approx((left - 300.0) / 2)
    assert budget.share_s(weights, now=2000.0) == 0.0  # past the deadline


def test_apply_keeps_at_most_its_cap_and_nothing_without_apply():
    assert TimeBudget.starting(10 * 3600.0, 0.0, apply=True).reserve_s == APPLY_MOST_S
    assert TimeBudget.starting(600.0, 0.0, apply=False).reserve_s == 0.0


def test_a_resumed_run_has_what_its_earlier_sessions_left():
    budget = TimeBudget.starting(1000.0, started=50.0, apply=False, spent_s=400.0)
    assert budget.left_s(now=50.0) == pytest.approx(600.0)


def test_a_task_in_the_ranking_still_gets_a_little_time():
    assert projected_gain(1.0) > 0 and projected_gain(0.9) > 0


EAGER = Timing(p20_ms=0.95, p50_ms=1.0, p80_ms=1.05, runs=10, method="wall-clock")


def ok(p50: float, eval_s: float = 0.0) -> EvalResult:
    t = Timing(p20_ms=p50 * 0.98, p50_ms=p50, p80_ms=p50 * 1.02, runs=10, method="wall-clock")
    return EvalResult(status="ok", timing=t, eager=EAGER, speedup_vs_eager=EAGER.p50_ms / p50,
                      faster_than_eager=p50 < 0.9, wall_s=eval_s)


def run_mcts(results: list[EvalResult], iterations: int, deadline: float | None = None, patience: int = 0,
             seconds_each: float = 0.0):
    nodes: list[Node] = []

    def evaluate(proposal, parent, decide):
        time.sleep(seconds_each)
        node = Node(node_id=f"n{len(nodes):04d}", parent_id=parent.node_id if parent else None,
                    proposal=proposal, result=results[len(nodes)])
        node.kept = decide(node)
        nodes.append(node)
        return node

    counter = iter(range(1000))
    ctx = scripted_context(lambda parent: Proposal(f"candidate {next(counter)}", "scripted"), evaluate, iterations)
    ctx.patience, ctx.deadline, ctx.share_s = patience, deadline, 12.0
    get_strategy("mcts").run(ctx)
    return nodes, ctx


def test_no_candidate_starts_once_the_tasks_share_is_spent():
    nodes, ctx = run_mcts([ok(1.0 - i / 100) for i in range(50)], iterations=50,
                          deadline=time.perf_counter() + 0.25, seconds_each=0.05)
    assert 3 <= len(nodes) < 50
    assert search_ended(ctx, "builtin") == f"its 12 s share of the time budget spent ({len(nodes)} of 50 iterations)"


def test_a_budgeted_task_stops_once_it_stopped_improving():
    assert _patience(seeded=False, deadline=time.perf_counter() + 60) == PLATEAU
    assert _patience(seeded=False, deadline=None) == 0  # without a budget the iterations decide
    results = [ok(0.5), ok(0.4)] + [ok(0.6)] * 40
    nodes, ctx = run_mcts(results, iterations=40, deadline=time.perf_counter() + 60, patience=PLATEAU)
    assert len(nodes) == 2 + PLATEAU
    assert search_ended(ctx, "builtin") == (f"stopped improving: no better candidate in the last {PLATEAU} "
                                            f"({2 + PLATEAU} of 40 iterations)")


def test_a_task_whose_baseline_took_its_share_still_evaluates_one_candidate():
    nodes, ctx = run_mcts([ok(0.5)] * 5, iterations=5, deadline=time.perf_counter() - 1.0)
    assert len(nodes) == 1
    assert search_ended(ctx, "builtin") == "its 12 s share of the time budget spent (1 of 5 iterations)"


def test_the_next_baseline_is_expected_from_the_seconds_per_byte_of_those_before():
    from kernforge.search.budget import FixedCosts, task_bytes

    big = [{"shape": [1, 128, 1024, 1024], "dtype": "torch.bfloat16", "stride": [1, 1, 1, 1]}, None, None, 1, 32]
    out = [{"shape": [1, 128, 1024, 1024], "dtype": "torch.bfloat16", "stride": [1, 1, 1, 1]},
           {"shape": [1, 32], "dtype": "torch.float32", "stride": [32, 1]}]
    assert task_bytes(big, out) == 2 * 2 * 128 * 1024 * 1024 + 32 * 4  # both bf16 tensors, 32 floats
    assert task_bytes([[{"shape": [4, 4], "dtype": "torch.float32"}], {"x": {"shape": [2], "dtype": "int64"}}],
                      []) == 64 + 16
    costs = FixedCosts()
    assert costs.expected_s(10**9) == 0.0  # nothing known before the first baseline
    costs.add(74.0, 537_000_000)
    assert costs.expected_s(268_500_000) == pytest.approx(37.0)


def test_a_candidate_starts_only_where_it_and_a_confirmation_fit():
    assert candidate_fits(left_s=24.0, eval_s=10.0)  # 10 s and a 14 s confirmation
    assert not candidate_fits(left_s=23.9, eval_s=10.0)
    assert candidate_fits(left_s=0.1, eval_s=None)  # no candidate timed yet: the share's end decides
    assert not candidate_fits(left_s=0.0, eval_s=None)
    assert CONFIRM_FACTOR == 1.4


def test_a_budgeted_task_stops_where_the_next_candidate_and_a_confirmation_would_not_fit():
    # each candidate took 0.5 s by its result: 1.2 s with a confirmation, more than the ~0.95 s left
    nodes, ctx = run_mcts([ok(1.0 - i / 100, eval_s=0.5) for i in range(20)], iterations=20,
                          deadline=time.perf_counter() + 1.0, seconds_each=0.05)
    assert len(nodes) == 1
    assert re.fullmatch(r"its 12 s share of the time budget nearly spent: 0\.\d s left, too little for another "
                        r"candidate \(0\.5 s each\) and a finalist's confirmation \(1\.4x\) \(1 of 20 iterations\)",
                        search_ended(ctx, "builtin"))


def test_quick_candidates_go_on_until_the_share_nearly_ends():
    nodes, ctx = run_mcts([ok(1.0 - i / 100, eval_s=0.01) for i in range(50)], iterations=50,
                          deadline=time.perf_counter() + 0.3, seconds_each=0.05)
    assert 3 <= len(nodes) < 50  # 0.024 s each with a confirmation: the clock, not the rule, ends it


def test_apply_gets_what_is_left_to_the_deadline():
    budget = TimeBudget.starting(400.0, started=0.0, apply=True)
    assert budget.apply_s(now=300.0) == 100.0  # its 100 s reserve, the search having kept to its part
    assert budget.apply_s(now=250.0) == 150.0  # a search that ended early leaves it more
    assert budget.apply_s(now=450.0) == 0.0  # one that ran late leaves it its fewest rounds


def test_the_confirmation_reserve_is_the_most_the_runs_confirmations_took():
    fixed = FixedCosts()
    assert fixed.confirm_factor() == CONFIRM_FACTOR  # nothing confirmed yet: the estimate
    fixed.add_confirmation(candidate_s=10.0, confirm_s=12.0)  # 1.2x: under the estimate, which stays
    assert fixed.confirm_factor() == CONFIRM_FACTOR
    fixed.add_confirmation(candidate_s=10.0, confirm_s=22.0)
    fixed.add_confirmation(candidate_s=10.0, confirm_s=15.0)
    assert fixed.confirm_factor() == pytest.approx(2.2)  # the slowest, not the mean
    fixed.add_confirmation(candidate_s=0.0, confirm_s=5.0)  # a candidate with no time says nothing
    assert fixed.confirm_factor() == pytest.approx(2.2)
    assert not candidate_fits(left_s=24.0, eval_s=10.0, confirm_factor=fixed.confirm_factor())
    assert candidate_fits(left_s=32.0, eval_s=10.0, confirm_factor=fixed.confirm_factor())


def _gn_task(channels: int, size: int) -> Any:
    t = {"shape": [1, channels, size, size], "dtype": "torch.bfloat16", "stride": [1, 1, 1, 1]}
    return SimpleNamespace(args=[t, None, None, 1, 32], outputs=[t])


def test_a_task_is_expected_to_cost_its_baseline_a_candidate_and_a_confirmation_by_its_bytes():
    fixed = FixedCosts()
    assert fixed.least_task_s(10**9) == 0.0  # nothing measured yet
    task = _gn_task(128, 1024)  # 537 MB in and out
    nbytes = task_bytes(task.args, task.outputs)
    fixed.add(27.0, nbytes)
    fixed.add_candidate(47.0, nbytes)  # the VAE's group norm on an H100: what the search waited for
    fixed.add_candidate(0.0, nbytes)  # a candidate with no time says nothing
    assert fixed.least_task_s(nbytes) == pytest.approx(27.0 + 47.0 * (1 + CONFIRM_FACTOR))
    assert fixed.least_task_s(nbytes // 2) == pytest.approx((27.0 + 47.0 * (1 + CONFIRM_FACTOR)) / 2)


def test_a_share_too_small_for_one_confirmed_candidate_is_raised_where_the_time_left_holds_it():
    from kernforge.optimize.loop import no_time, task_share

    task = _gn_task(128, 1024)
    nbytes = task_bytes(task.args, task.outputs)
    fixed = FixedCosts()
    fixed.add(27.0, nbytes)
    fixed.add_candidate(47.0, nbytes)
    least = fixed.least_task_s(nbytes)  # 139.8 s
    budget = TimeBudget.starting(400.0, started=time.perf_counter(), apply=False)
    share = task_share(budget, [1.0] * 8, fixed, nbytes)  # 50 s by weight: raised
    assert share == pytest.approx(least)
    assert no_time(budget, share, fixed, nbytes, 7) == ""
    late = TimeBudget.starting(100.0, started=time.perf_counter(), apply=False)
    share = task_share(late, [1.0] * 2, fixed, nbytes)  # 100 s left cannot hold 139.8 s: not raised
    assert share == pytest.approx(50.0, abs=0.5)
    assert no_time(late, share, fixed, nbytes, 1).startswith(
        "not started: its baseline, one candidate and its confirmation would take about 140 s")


def test_a_candidate_is_counted_at_what_the_search_waited_for_it():
    # the worker's wall is 1 s, the whole evaluation (judging included) 0.5 s more than the share holds
    result = ok(0.5, eval_s=1.0)
    result.evaluation_s = 5.0
    nodes, ctx = run_mcts([result] + [ok(0.4, eval_s=1.0)] * 5, iterations=6,
                          deadline=time.perf_counter() + 6.0, seconds_each=0.01)
    assert len(nodes) == 1
    assert "(5.0 s each)" in search_ended(ctx, "builtin")
