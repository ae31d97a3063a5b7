"""The mixed proposer: the built-in proposer's moves where it has a family, the LLM for the rest.

  an op no family knows         every candidate is the LLM's, so no hot op is skipped for want
                                of a template;
  an op a family knows          the built-in starting point and its parameter moves, and every
                                REWRITE_EVERY-th expansion of a built-in node the LLM's rewrite
                                of it (an idea no template holds); where the built-in proposer
                                has nothing new near a node, the LLM takes it;
  an LLM's or a human's node    expanded by the LLM: the templates have no parameters to move;
  a seed (a sibling's best)     the built-in proposer starts from its point; an LLM's or a
                                human's seed has no point, so the LLM adapts its source first.
"""

from __future__ import annotations

import threading
from typing import Any

from kernforge.propose.builtin import BuiltinProposer
from kernforge.propose.context import ProposalContext
from kernforge.propose.llm import LLMProposer
from kernforge.records.proposal import NoProposal, Proposal

# One expansion in four of a built-in node is the LLM's: the moves stay the bulk of a small budget
# (the templates are tuned), and a 16-candidate search still gets three rewrites.
REWRITE_EVERY = 4


class MixedProposer:
    name = "mixed"
    inline = False

    def __init__(self, llm: LLMProposer, builtin: BuiltinProposer | None = None) -> None:
        self.llm, self.builtin = llm, builtin or BuiltinProposer()
        self.concurrency, self.repairs = llm.concurrency, llm.repairs
        self._lock = threading.Lock()
        self._expansions = 0
        self._builtin_sources: list[Proposal] = []  # its own, in flight ones included

    def check(self) -> None:
        self.llm.check()

    def why_unsupported(self, task: Any, backend: str) -> str | None:
        return self.llm.why_unsupported(task, backend)

    def budget_exhausted(self) -> str | None:
        return self.llm.budget_exhausted()

    def propose(self, ctx: ProposalContext) -> Proposal | NoProposal:
        if self.builtin.why_unsupported(ctx.task, ctx.backend) is not None:
            return self.llm.propose(ctx)
        if ctx.parent is not None and ctx.parent.proposal.origin != "builtin":
            return self.llm.propose(ctx)
        if ctx.parent is None and not ctx.tried and ctx.seed and ctx.seed.attempt.proposal.origin != "builtin":
            return self.llm.propose(ctx)
        with self._lock:
            self._expansions += 1
            rewrite = ctx.parent is not None and self._expansions % REWRITE_EVERY == 0
            move = None if rewrite else self._move(ctx)
        if move is not None:
            return move
        return self.llm.propose(ctx)

    def _move(self, ctx: ProposalContext) -> Proposal | None:
        """A built-in move; the ones it made that are still being evaluated count as tried (the
        context was built before they were recorded)."""
        seen = {p.source for p in ctx.tried}
        tried = ctx.tried + [p for p in self._builtin_sources if p.source not in seen]
        parent = ctx.parent.proposal if ctx.parent else None
        proposal = self.builtin.next_move(ctx.task, ctx.backend, parent, tried, ctx.failures, seed=ctx.seed)
        if proposal is not None:
            self._builtin_sources.append(proposal)
        return proposal
