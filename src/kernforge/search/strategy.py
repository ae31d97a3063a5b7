"""Search strategies: which node to expand next, and what to keep.

A strategy drives one task's search through a SearchContext (search/engine.py): it
launches expansions of the nodes it picks, takes back each finished one (a Node, or
the NoProposal the proposer gave instead), and returns when the budget is spent, the
context stopped (an LLM budget) or the proposer has nothing new anywhere. A failed
node the proposer can repair (ctx.wants_repair: an LLM's build error, wrong result or
scan finding) is expanded next, so that a repair sees its error while it is fresh.
Greedy is in greedy.py, MCTS in mcts.py; each is one registry line below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from kernforge.errors import UserError
from kernforge.search.greedy import Greedy
from kernforge.search.mcts import MCTS

if TYPE_CHECKING:
    from kernforge.search.engine import SearchContext


class Strategy(Protocol):
    name: str

    def run(self, ctx: SearchContext) -> None: ...


STRATEGIES: dict[str, Callable[[], Strategy]] = {"greedy": Greedy, "mcts": MCTS}


def get_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise UserError(f"unknown strategy '{name}'; choose one of: {', '.join(STRATEGIES)}")
    return STRATEGIES[name]()
