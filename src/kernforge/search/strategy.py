"""Search strategies: which node to expand next, and what to keep.

A strategy drives one task's search through a SearchContext (search/engine.py): it
launches expansions of the nodes it picks, takes back each finished one (a Node, or
the NoProposal the proposer gave instead), and returns when the budget is spent, the
context stopped (an LLM budget) or the proposer has nothing new anywhere. A failed
node the proposer can repair (ctx.wants_repair: an LLM's build error, wrong result or
scan finding) is expanded next, so that a repair sees its error while it is fresh.
Greedy is here; MCTS is in mcts.py; each is one registry line below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from kernforge.errors import UserError
from kernforge.evaluate import clearly_faster_relative
from kernforge.propose import NoProposal

if TYPE_CHECKING:
    from kernforge.search.engine import Node, SearchContext


class Strategy(Protocol):
    name: str

    def run(self, ctx: SearchContext) -> None: ...


class Greedy:
    """Keep-or-revert along one path: a child replaces the current node only if clearly faster.
    One candidate at a time: the baseline that MCTS is measured against."""

    name = "greedy"

    def run(self, ctx: SearchContext) -> None:
        kept = [n for n in ctx.previous if n.kept]
        current: Node | None = kept[-1] if kept else None
        expand = current
        while ctx.budget_left() > 0:
            ctx.report_tree({"strategy": self.name, "current": current.node_id if current else None})
            node = ctx.expand(expand, lambda n, cur=current: keeps(n, cur))
            if isinstance(node, NoProposal):
                if node.kind == "exhausted" and expand is current:
                    return
                expand = current  # a repair that did not come: back to the kept node
                continue
            if node.kept:
                current = node
            expand = node if ctx.wants_repair(node) else current


def keeps(node: Node, current: Node | None) -> bool:
    """A correct node replaces the current best when it is clearly faster (or there is none)."""
    return node.result.ok and (current is None or _better(node, current))


def _better(node: Node, current: Node) -> bool:
    a, b = node.result, current.result
    if not (a.timing and a.eager and b.timing and b.eager):
        return False  # untimed (interpreter): the first correct candidate stays
    return clearly_faster_relative(a.timing, a.eager, b.timing, b.eager)


def _mcts() -> Strategy:
    from kernforge.search.mcts import MCTS

    return MCTS()


STRATEGIES: dict[str, Callable[[], Strategy]] = {"greedy": Greedy, "mcts": _mcts}


def get_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise UserError(f"unknown strategy '{name}'; choose one of: {', '.join(STRATEGIES)}")
    return STRATEGIES[name]()
