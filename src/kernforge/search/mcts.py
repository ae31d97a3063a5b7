"""Monte Carlo Tree Search over candidates.

A tree node is one evaluated candidate (the root stands for "no candidate yet");
an edge is one proposal. Each iteration:
  select    walk down from the root by an upper confidence bound on the normalised
            reward, the best log-speedup in a child's subtree, stopping at a node that
            may still widen (a node with n visits may have ceil(n ** 0.5) children);
            subtrees that stopped improving (4 expansions without a better result)
            are passed over while others remain;
  expand    ask the proposer for a candidate that varies the selected node;
  evaluate  build, check and time it in a worker (the SearchContext does this;
            several at once when ctx.parallel > 1, see MCTS);
  back up   add a visit and the reward to every node on the way back to the root.
A node whose proposer has nothing new is exhausted; the search ends when the
budget is spent or every node is exhausted. Failed candidates have no reward
(they count as the worst) but can still be expanded, since a variation of a
broken kernel may work; one the proposer repairs (ctx.wants_repair) is expanded
before any selection, so that its repair is the next candidate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernforge.records.proposal import NoProposal
from kernforge.search.greedy import keeps

if TYPE_CHECKING:
    from kernforge.search.engine import SearchContext
    from kernforge.records.nodes import Node

EXPLORATION = 1.0  # the UCB constant: sqrt(2) is the textbook value for rewards in [0, 1]; 1 explores a bit less
WIDENING_ALPHA = 0.5  # a node with n visits may have ceil(n ** alpha) children
STAGNATION = 4  # expansions under a node without a better result before it is passed over


@dataclass(eq=False)
class TreeNode:
    node: Node | None  # None at the root
    children: list[TreeNode] = field(default_factory=list)
    visits: int = 0
    best: float | None = None  # the best reward in this subtree
    stale: int = 0  # expansions since `best` last improved
    exhausted: bool = False  # the proposer has nothing new to expand it with
    pending: int = 0  # children being evaluated right now

    def closed(self) -> bool:
        return self.exhausted and all(c.closed() for c in self.children)


def reward(node: Node) -> float | None:
    """log(speedup over eager) for a correct timed candidate; 0 for a correct untimed one."""
    r = node.result
    if not r.ok:
        return None
    if r.timing and r.eager:
        return math.log(r.eager.p50_ms / r.timing.p50_ms)
    return 0.0


class MCTS:
    """With ctx.parallel > 1 the search keeps every worker busy: whenever one finishes, its
    result is backed up and new leaves are selected until the workers are full again (no
    rounds that wait for their slowest candidate). Each selection adds a pending child to its
    leaf and a virtual visit along its path, undone when the result is in, so that the next
    selection looks elsewhere."""

    name = "mcts"

    def __init__(self) -> None:
        self.rewards: list[float] = []
        self.best: Node | None = None
        self.repairs: list[list[TreeNode]] = []  # paths to failed nodes the proposer repairs next

    def run(self, ctx: SearchContext) -> None:
        root = TreeNode(node=None)
        self._rebuild(root, ctx.previous)
        running: dict[object, list[TreeNode]] = {}
        while True:
            self._fill(root, ctx, running)
            ctx.report_tree(self.stats(root))
            if not running:
                return  # budget spent, or every node exhausted: the proposer has nothing new anywhere
            handle, node = ctx.next_done()
            path = running.pop(handle)
            for t in path:
                t.visits -= 1
            path[-1].pending -= 1
            if isinstance(node, NoProposal):
                self._no_proposal(path[-1], node)
                continue
            child = self._attach(path, node)
            if ctx.wants_repair(node):
                self.repairs.append([*path, child])

    def stats(self, root: TreeNode) -> dict[str, Any]:
        """What a view of the tree needs beside the nodes' results: per node its visits, the best
        speedup in its subtree (exp of the best reward), expansions without a better result, and
        whether the proposer has nothing new there."""
        nodes: dict[str, Any] = {}
        stack = [root]
        while stack:
            t = stack.pop()
            key = t.node.node_id if t.node else "root"
            nodes[key] = {"visits": t.visits, "children": len(t.children), "pending": t.pending,
                          "subtree_best_speedup": math.exp(t.best) if t.best is not None else None,
                          "stale": t.stale, "passed_over": t.stale >= STAGNATION,
                          "exhausted": t.exhausted, "closed": t.closed()}
            stack.extend(t.children)
        return {"strategy": self.name, "nodes": nodes}

    def _fill(self, root: TreeNode, ctx: SearchContext, running: dict[object, list[TreeNode]]) -> None:
        """Start candidates until every worker is busy, the budget is spent, or no leaf can be
        expanded before a running candidate is back."""
        while len(running) < ctx.parallel and ctx.budget_left() > 0:
            path = self.repairs.pop(0) if self.repairs else self._select(root)
            if path is None:
                return
            leaf = path[-1]
            launched = ctx.launch(leaf.node, self._decide)
            if isinstance(launched, NoProposal):
                self._no_proposal(leaf, launched)
                continue
            for t in path:
                t.visits += 1  # virtual: undone when the result is backed up
            leaf.pending += 1
            running[launched] = path

    def _no_proposal(self, leaf: TreeNode, outcome: NoProposal) -> None:
        """Nothing came for this leaf: closed for good if the proposer has nothing new there;
        a retry leaves it open (the context counts retries and stops a run of them)."""
        if outcome.kind == "exhausted":
            leaf.exhausted = True

    def _decide(self, node: Node) -> bool:
        if keeps(node, self.best):
            self.best = node
            return True
        return False

    def _attach(self, path: list[TreeNode], node: Node) -> TreeNode:
        child = TreeNode(node=node)
        path[-1].children.append(child)
        self._back_up([*path, child], reward(node))
        return child

    def _rebuild(self, root: TreeNode, previous: list[Node]) -> None:
        """The tree as it was before a resume: each recorded node under its parent, rewards backed up."""
        paths: dict[str | None, list[TreeNode]] = {None: [root]}
        for node in previous:
            parent_path = paths.get(node.parent_id, [root])
            paths[node.node_id] = [*parent_path, self._attach(parent_path, node)]
            if node.kept:
                self.best = node

    def _select(self, root: TreeNode) -> list[TreeNode] | None:
        if root.closed():
            return None
        path = [root]
        while True:
            current = path[-1]
            if not current.exhausted and len(current.children) + current.pending < self._width(current):
                return path
            open_children = [c for c in current.children if not c.closed()]
            moving = [c for c in open_children if c.stale < STAGNATION] or open_children
            if not moving:
                if current.exhausted or current.pending:
                    # nothing to descend into until the pending children are back: wait for
                    # them rather than widen (a first round of 8 would otherwise be 8 starting
                    # points, half of a 16-iteration budget spent before any is refined)
                    return None
                return path  # not exhausted, every child closed: widen past the limit
            path.append(max(moving, key=lambda c: self._ucb(c, current)))

    def _width(self, t: TreeNode) -> int:
        return max(1, math.ceil(max(1, t.visits) ** WIDENING_ALPHA))

    def _ucb(self, child: TreeNode, parent: TreeNode) -> float:
        explore = EXPLORATION * math.sqrt(math.log(parent.visits + 1) / (child.visits + 1))
        return self._normalised(child.best) + explore

    def _normalised(self, value: float | None) -> float:
        """Rewards mapped onto [0, 1] by the range seen so far; no reward (a failure) is 0."""
        if value is None or not self.rewards:
            return 0.0
        low, high = min(self.rewards), max(self.rewards)
        return 0.5 if high == low else (value - low) / (high - low)

    def _back_up(self, path: list[TreeNode], value: float | None) -> None:
        if value is not None:
            self.rewards.append(value)
        for t in path:
            t.visits += 1
            if value is not None and (t.best is None or value > t.best):
                t.best, t.stale = value, 0
            else:
                t.stale += 1
