"""Search strategies: which node to expand next, and what to keep.

A strategy drives one task's search through a SearchContext:
  ctx.propose(parent)   asks the proposer for a candidate expanding `parent`
                        (None: a first candidate); None when it has nothing new;
  ctx.evaluate(p, parent, decide) builds, checks and times it in a worker and
                        returns the Node, kept when decide(node) says so;
  ctx.launch(p, parent, decide) starts one and returns a handle at once (up to
                        ctx.parallel run at the same time);
  ctx.next_done()       waits for any started one: (handle, node);
  ctx.budget_left()     how many candidates may still be started;
  ctx.previous          the nodes recorded before a resume, to start from.
It returns when the budget is spent or the proposer runs dry. Greedy is here;
MCTS is in mcts.py; each is one registry line below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from kernforge.errors import UserError
from kernforge.evaluate import clearly_faster_relative

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
        while ctx.budget_left() > 0:
            proposal = ctx.propose(current)
            if proposal is None:
                return
            node = ctx.evaluate(proposal, current, lambda n, cur=current: keeps(n, cur))
            if node.kept:
                current = node


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
