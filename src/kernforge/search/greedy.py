"""Greedy: keep-or-revert along one path, and the rule every strategy keeps a node by."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernforge.evaluate import clearly_faster_relative
from kernforge.records.proposal import NoProposal

if TYPE_CHECKING:
    from kernforge.search.engine import SearchContext
    from kernforge.records.nodes import Node


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
