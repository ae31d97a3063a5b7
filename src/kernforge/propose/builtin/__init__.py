"""The built-in proposer: kernel files per op family, and moves in each family's space.

Needs no LLM and no network. Each family (propose/families/, family.py) says which tasks it
matches, its space of variants and the parameters each reads (space.py), a starting point
chosen by a rule from the task's and the machine's facts, and how a point becomes a source.
A move changes one parameter of the parent to a neighbouring value not tried yet (or
switches the variant); when every neighbour has been tried, it goes to the nearest
untried point. Two points that render the same source count as one. A move that failed
before (the same parameter set to the same value, from any parent) is tried only when no
other move is left: it failed for a reason that may well hold again (a block too large to
compile, a variant wrong for this shape). A task with a seed (a sibling's best point, found
on another shape of the same op) starts there instead of at the family's rule, the point
made legal for this shape first (Space.legal).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from kernforge.propose.builtin.family import Family, Hardware, families
from kernforge.propose.builtin.space import Space
from kernforge.propose.context import ProposalContext, Seed
from kernforge.records.proposal import Failure, NoProposal, Proposal
from kernforge.records.task import KernelTask

__all__ = ["BuiltinProposer", "Family", "Hardware"]


class BuiltinProposer:
    name = "builtin"
    inline = True  # a move is a millisecond of Python at most: no thread of its own
    concurrency = 1
    repairs = 0  # a failed configuration is moved away from (next_move), not repaired

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)
        self._spaces: dict[tuple, Space | None] = {}

    def check(self) -> None:
        """Nothing to check: the templates need only the machine."""

    def budget_exhausted(self) -> str | None:
        return None  # it spends nothing but the search's own candidates

    def propose(self, ctx: ProposalContext) -> Proposal | NoProposal:
        """A move from the parent, if the parent is one of this proposer's; an LLM's or a human's
        candidate has no parameters to move, so it is expanded like a first one."""
        parent = ctx.parent.proposal if ctx.parent and ctx.parent.proposal.origin == "builtin" else None
        proposal = self.next_move(ctx.task, ctx.backend, parent, ctx.tried, ctx.failures,
                                  Hardware.from_facts(ctx.hardware), ctx.seed)
        return proposal or NoProposal("every configuration near this one was tried", "exhausted")

    def why_unsupported(self, task: KernelTask, backend: str) -> str | None:
        reasons = []
        for family in families():
            facts = family.match(task)
            if isinstance(facts, str):
                reasons.append(facts)
            elif family.space(facts, backend, Hardware()) is None:
                reasons.append(f"no {backend} template for {family.name}")
            else:
                return None
        # Families that do not know the op at all say so in the same words; the reasons of
        # those that know it but not this case (a layout, a dtype) are the ones worth reading.
        generic = f"no built-in template for {task.op}"
        specific = list(dict.fromkeys(r for r in reasons if r != generic))
        return "; ".join(specific) or generic

    def next_move(self, task: KernelTask, backend: str, parent: Proposal | None,
                  tried: list[Proposal], failures: Sequence[Failure] = (),
                  hardware: Hardware | None = None, seed: Seed | None = None) -> Proposal | None:
        """A new candidate expanding `parent` (None: a first one), or None when nothing is left.
        `tried` holds every proposal so far; `failures` the ones that failed, and why; `seed` a
        sibling's best, where a first candidate starts while it is untried."""
        hw = hardware or Hardware()
        family, facts = self._family_for(task)
        space = self._space(family, facts, backend, hw)
        if space is None:
            return None
        failed_moves = {(name, _key(value)): f.status for f in failures
                        if len(f.proposal.changes) == 1 for name, value in f.proposal.changes.items()}
        seen_sources = {p.source for p in tried}
        seen_points = {space.key(p.params) for p in tried if p.params}

        def fresh(point: dict[str, Any]) -> bool:
            # A point tried before is stale without rendering it; a new one still is when it
            # renders a source tried before (two points the kernel file does not tell apart).
            return (space.key(point) not in seen_points
                    and family.render(facts, backend, point) not in seen_sources)

        if parent is None:
            start = space.fit(family.start(facts, backend, hw))
            if not space.contains(start):
                start = space.nearest(start, lambda p: True) or start
            seeded = _seed_point(space, seed)
            if seeded is not None and fresh(seeded):
                return self._proposal(family, facts, backend, seeded, {}, _seed_rationale(seed, seeded))
            if space.contains(start) and fresh(start):
                return self._proposal(family, facts, backend, start, {}, "starting point: " + _describe(start))
            parent_point = seeded or start  # both tried: move on from the better known point
        else:
            parent_point = parent.params
            if space.variant_of(parent_point) is None:
                return None  # a point of another space (an older kernforge's): nothing to move
        suspects = _never_passed(tried, failures)
        move = self._neighbour(space, parent_point, fresh, failed_moves, suspects)
        if move is not None:
            name, new, point = move
            old = parent_point.get(name)
            why = f"{name} {old} -> {new}: {family.explain(name, old, new)}"
            status = failed_moves.get((name, _key(new)))
            if status:
                why += f" (this move failed before as {status}; every other move is tried)"
            away = suspects.get((name, _key(old)))
            if away:
                why += f" ({name}={old} failed {away} times and never passed: moving away from it)"
            return self._proposal(family, facts, backend, point, parent_point, why)
        jump = space.nearest(parent_point, fresh)
        if jump is None:
            return None
        return self._proposal(family, facts, backend, jump, parent_point,
                              "every neighbour tried; jump to the nearest untried point: " + _describe(jump))

    def _space(self, family: Family, facts: dict[str, Any], backend: str, hw: Hardware) -> Space | None:
        """The family's space for these facts, built once per proposer (it keeps what its walks found)."""
        key = (family.name, backend, repr(sorted(facts.items())), hw)
        if key not in self._spaces:
            self._spaces[key] = family.space(facts, backend, hw)
        return self._spaces[key]

    def _family_for(self, task: KernelTask) -> tuple[Family, dict[str, Any]]:
        for family in families():
            facts = family.match(task)
            if not isinstance(facts, str):
                return family, facts
        raise ValueError(f"no family matches {task.op}")

    def _proposal(self, family: Family, facts: dict[str, Any], backend: str, point: dict[str, Any],
                  parent_point: dict[str, Any], rationale: str) -> Proposal:
        changes = {k: v for k, v in point.items() if k not in parent_point or parent_point[k] != v}
        return Proposal(source=family.render(facts, backend, point), rationale=rationale,
                        params=dict(point), changes=changes)

    def _neighbour(self, space: Space, point: dict[str, Any], fresh: Callable[[dict[str, Any]], bool],
                   failed_moves: dict[tuple[str, str], str],
                   suspects: dict[tuple[str, str], int]) -> tuple[str, Any, dict[str, Any]] | None:
        moves = [m for m in space.neighbours(point) if fresh(m[2])]
        # A parent holding a value that has only ever failed (a variant that does not compile
        # here, say) first moves that value away: tweaking its numbers would fail the same way.
        # The most-failed value first, ties in the space's order (structure before numbers).
        away = [m for m in moves if (m[0], _key(point[m[0]])) in suspects and (m[0], _key(m[1])) not in suspects]
        if away:
            worst = max(suspects[(name, _key(point[name]))] for name, _, _ in away)
            first = next(name for name in space.names(point) if suspects.get((name, _key(point[name]))) == worst
                         and any(m[0] == name for m in away))
            return self.rng.choice([m for m in away if m[0] == first])
        untainted = [m for m in moves if (m[0], _key(m[1])) not in failed_moves]
        pool = untainted or moves
        return self.rng.choice(pool) if pool else None


def _never_passed(tried: Sequence[Proposal], failures: Sequence[Failure]) -> dict[tuple[str, str], int]:
    """(parameter, value) pairs in at least two failures and in no other proposal (a pending one
    counts as not failed): how many failures each is in."""
    failed_sources = {f.proposal.source for f in failures}
    counts = Counter((name, _key(value)) for f in failures for name, value in f.proposal.params.items())
    others = {(name, _key(value)) for p in tried if p.source not in failed_sources for name, value in p.params.items()}
    return {pair: n for pair, n in counts.items() if n >= 2 and pair not in others}


def _seed_point(space: Space, seed: Seed | None) -> dict[str, Any] | None:
    """The seed's point made legal for this task's space; None without a built-in seed, or
    where its kind of kernel is not in this space (the family's rule starts instead)."""
    if seed is None or seed.attempt.proposal.origin != "builtin" or not seed.attempt.proposal.params:
        return None
    return space.legal(seed.attempt.proposal.params)


def _seed_rationale(seed: Seed, point: dict[str, Any]) -> str:
    """Where a seeded start comes from, and what this shape changed of the sibling's point."""
    found = seed.attempt.proposal.params
    speed = seed.attempt.speedup
    there = f", {speed:.2f}x vs eager there" if speed else ""
    moved = [f"{k} {found.get(k)} -> {v}" for k, v in point.items() if found.get(k) != v]
    legal = f" (made legal for this shape: {', '.join(moved)})" if moved else ""
    return f"seeded from {seed.label}, the best of a sibling of shape {seed.shape}{there}: {_describe(point)}{legal}"


def _key(value: Any) -> str:
    return repr(value)  # parameter values may be unhashable (lists); their repr is stable


def _describe(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())
