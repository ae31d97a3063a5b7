"""kernforge.search.mcts: the tree search, on scripted landscapes (no workers).

Each scripted candidate's time depends on its lineage, so the tests can build a
landscape where one path is a trap (greedy's) and another leads further.
"""

from __future__ import annotations

from kernforge.evaluate import EvalResult, Timing
from kernforge.propose import Proposal
from kernforge.search import Node, SearchContext, get_strategy

EAGER = Timing(p20_ms=0.99, p50_ms=1.0, p80_ms=1.01, runs=10, method="test")


def timed(p50: float) -> EvalResult:
    t = Timing(p20_ms=p50 * 0.99, p50_ms=p50, p80_ms=p50 * 1.01, runs=10, method="test")
    return EvalResult(status="ok", timing=t, eager=EAGER)


def run(strategy: str, landscape, iterations: int, supply: int | None = None):
    """landscape(lineage of proposal numbers) -> EvalResult; returns the nodes in order."""
    nodes: list[Node] = []
    lineage: dict[str, list[int]] = {}
    proposed = {"n": 0}

    def propose(parent):
        if supply is not None and proposed["n"] >= supply:
            return None
        proposed["n"] += 1
        chain = (lineage[parent.node_id] if parent else []) + [proposed["n"]]
        return Proposal(source=f"candidate {proposed['n']}", rationale="scripted", params={"chain": chain})

    def evaluate(proposal, parent, keep_if):
        node_id = f"n{len(nodes)}"
        lineage[node_id] = proposal.params["chain"]
        node = Node(node_id=node_id, parent_id=parent.node_id if parent else None, proposal=proposal,
                    result=landscape(proposal.params["chain"]))
        node.kept = keep_if(node)
        nodes.append(node)
        return node

    get_strategy(strategy).run(SearchContext(task=None, iterations=iterations, propose=propose,
                                             evaluate=evaluate))
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
