"""kernforge.search.mcts: the tree search, on scripted landscapes (no workers).

Each scripted candidate's time depends on its lineage, so the tests can build a
landscape where one path is a trap (greedy's) and another leads further.
"""

from __future__ import annotations

import pytest

from helpers import scripted_context

from kernforge.records.evaluation import EvalResult
from kernforge.records.nodes import Node
from kernforge.records.proposal import Proposal
from kernforge.records.timing import Timing
from kernforge.search import get_strategy

pytestmark = pytest.mark.unit

EAGER = Timing(p20_ms=0.99, p50_ms=1.0, p80_ms=1.01, runs=10, method="test")


def timed(p50: float) -> EvalResult:
    t = Timing(p20_ms=p50 * 0.99, p50_ms=p50, p80_ms=p50 * 1.01, runs=10, method="test")
    return EvalResult(status="ok", timing=t, eager=EAGER)


def run(strategy: str, landscape, iterations: int, supply: int | None = None, parallel: int = 1,
        first: list[Node] | None = None, duration=lambda proposal: 1.0) -> list[Node]:
    """landscape(lineage of proposal numbers) -> EvalResult; returns the new nodes in order.
    `first`: the nodes of an earlier search to continue from, as --resume does."""
    first = first or []
    nodes: list[Node] = []
    lineage = {n.node_id: n.proposal.params["chain"] for n in first}
    proposed = {"n": max((c for n in first for c in n.proposal.params["chain"]), default=0)}

    def propose(parent):
        if supply is not None and proposed["n"] >= supply:
            return None
        proposed["n"] += 1
        chain = (lineage[parent.node_id] if parent else []) + [proposed["n"]]
        return Proposal(source=f"candidate {proposed['n']}", rationale="scripted", params={"chain": chain})

    def evaluate(proposal, parent, keep_if):
        node_id = f"n{len(first) + len(nodes)}"
        lineage[node_id] = proposal.params["chain"]
        node = Node(node_id=node_id, parent_id=parent.node_id if parent else None, proposal=proposal,
                    result=landscape(proposal.params["chain"]))
        node.kept = keep_if(node)
        nodes.append(node)
        return node

    ctx = scripted_context(propose, evaluate, iterations, parallel=parallel, previous=first, duration=duration)
    get_strategy(strategy).run(ctx)
    run.running, run.spans = ctx.running_at_wait, ctx.spans
    return nodes


def best_speedup(nodes: list[Node]) -> float:
    return max(n.result.eager.p50_ms / n.result.timing.p50_ms for n in nodes if n.result.ok)


def trap(chain: list[int]) -> EvalResult:
    """The first candidate is good (1.25x) but everything below it is worse; the second
    first-level candidate starts slower (1.1x) and its descendants get faster with depth."""
    if chain[0] == 1:
        return timed(0.8 if len(chain) == 1 else 0.9)
    if chain[0] == 2 or len(chain) > 1:
        return timed(max(0.3, 0.9 - 0.1 * (len(chain) - 1)))
    return timed(0.95)


def test_mcts_spends_exactly_the_budget():
    nodes = run("mcts", lambda chain: timed(0.9), iterations=12)
    assert len(nodes) == 12


def test_mcts_stops_when_the_proposer_has_nothing_left():
    nodes = run("mcts", lambda chain: timed(0.9), iterations=50, supply=7)
    assert len(nodes) == 7


def test_mcts_leaves_a_trap_that_holds_greedy():
    greedy = run("greedy", trap, iterations=20)
    mcts = run("mcts", trap, iterations=20)
    assert best_speedup(greedy) < 1.3  # stuck under the first candidate
    assert best_speedup(mcts) > 1.5
    # and it explores more than one first-level candidate
    assert len([n for n in mcts if n.parent_id is None]) >= 2


def test_mcts_marks_only_new_best_nodes_as_kept():
    nodes = run("mcts", trap, iterations=20)
    kept = [n for n in nodes if n.kept]
    times = [n.result.timing.p50_ms for n in kept]
    assert times == sorted(times, reverse=True) and len(set(times)) == len(times)


def test_mcts_expands_past_failures():
    def landscape(chain):
        return EvalResult(status="wrong_result", reason="bad") if len(chain) == 1 else timed(0.5)

    nodes = run("mcts", landscape, iterations=10)
    assert any(n.result.ok for n in nodes)  # a variation of a broken candidate may work


def test_mcts_evaluates_several_candidates_at_once_when_parallel():
    nodes = run("mcts", trap, iterations=20, parallel=4)
    assert len(nodes) == 20
    assert max(run.running) == 4
    assert len({n.proposal.source for n in nodes}) == 20
    # Still out of the trap that holds greedy under 1.3x, though a child cannot be expanded
    # before it is evaluated, so it goes less deep than one-at-a-time in the same 20 candidates.
    assert best_speedup(nodes) > 1.3


def test_a_parallel_search_refines_its_first_candidate_before_adding_starting_points():
    nodes = run("mcts", lambda chain: timed(1.0 / len(chain)), iterations=16, parallel=8)
    assert run.running[0] == 1  # nothing to refine yet: one starting point, not eight
    roots = [n for n in nodes if n.parent_id is None]
    assert len(roots) <= 4 and len(nodes) == 16  # ceil(16 ** 0.5) at most, the rest refines them


def test_parallel_searches_never_exceed_the_budget_or_the_workers():
    nodes = run("mcts", lambda chain: timed(0.9), iterations=10, parallel=4)
    assert len(nodes) == 10 and max(run.running) <= 4


def test_a_slow_candidate_does_not_hold_the_other_workers():
    """Every fifth candidate takes 20 times as long. A worker that finishes starts the next
    candidate at once, so candidates started after a slow one finish before it (in rounds, a
    round would wait for its slowest), and once the tree is wide enough the workers stay full."""
    slow = lambda proposal: 20.0 if proposal.params["chain"][-1] % 5 == 0 else 1.0
    nodes = run("mcts", lambda chain: timed(1.0 / len(chain)), iterations=40, parallel=4, duration=slow)
    assert len(nodes) == 40
    spans = run.spans
    slow_ids = [n.node_id for n in nodes if n.proposal.params["chain"][-1] % 5 == 0]
    assert any(spans[other][0] > spans[s][0] and spans[other][1] < spans[s][1]
               for s in slow_ids for other in spans)
    assert sum(r == 4 for r in run.running) >= len(run.running) // 2


def resumed(strategy: str, landscape, first: list[Node], iterations: int) -> list[Node]:
    """Continue a search from the nodes of an earlier one, as --resume does."""
    return run(strategy, landscape, iterations, first=first)


def test_resumed_mcts_spends_only_the_rest_of_the_budget_and_builds_on_the_old_tree():
    first = run("mcts", trap, iterations=8)
    more = resumed("mcts", trap, first, iterations=20)
    assert len(more) == 12
    old_ids = {n.node_id for n in first}
    assert any(n.parent_id in old_ids for n in more)  # expands recorded nodes, not a new root only
    # a new node is kept only if it beats the best recorded one
    best_before = max(n.result.eager.p50_ms / n.result.timing.p50_ms for n in first if n.kept)
    for n in more:
        if n.kept:
            assert n.result.eager.p50_ms / n.result.timing.p50_ms > best_before


def test_resumed_greedy_continues_from_the_last_kept_node():
    first = run("greedy", lambda chain: timed(1.0 / len(chain)), iterations=3)
    more = resumed("greedy", lambda chain: timed(1.0 / len(chain)), first, iterations=5)
    assert len(more) == 2
    assert more[0].parent_id == [n for n in first if n.kept][-1].node_id
