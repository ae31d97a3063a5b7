"""The built-in proposer: kernel templates per op family, and moves in their parameter space.

Needs no LLM and no network. Each family (see templates/) says which tasks it
matches, the parameters its kernels take with their allowed values, a starting
point, and how to render a source file. A move changes one parameter of the
parent to a neighbouring value not tried yet; when every neighbour has been
tried, it jumps to the nearest untried configuration. Two configurations that
render the same source (a parameter the chosen variant ignores) count as one.
A move that failed before (the same parameter set to the same value, from any
parent) is tried only when no other move is left: it failed for a reason that
may well hold again (a block too large to compile, a variant wrong for this shape).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kernforge.propose import Failure, NoProposal, Proposal
from kernforge.propose.context import ProposalContext
from kernforge.tasks import KernelTask


@dataclass(frozen=True)
class Family:
    name: str
    # task -> facts the templates need (shapes, dtype...), or a string saying why not.
    match: Callable[[KernelTask], dict[str, Any] | str]
    # (facts, backend) -> {parameter: allowed values, in order}; an empty dict: backend not handled.
    space: Callable[[dict[str, Any], str], dict[str, list[Any]]]
    initial: Callable[[dict[str, Any], str], dict[str, Any]]
    render: Callable[[dict[str, Any], str, dict[str, Any]], str]
    # (facts, backend, params) -> whether this combination can be built (register budgets...).
    valid: Callable[[dict[str, Any], str, dict[str, Any]], bool]
    # (parameter, old value, new value) -> why the move might help.
    explain: Callable[[str, Any, Any], str]


# One module per group of families under templates/, each exporting FAMILIES; a task
# goes to the first family that matches it.
FAMILY_MODULES = ("softmax", "norms", "reduce", "pool", "elementwise")


def _families() -> list[Family]:
    import importlib

    families: list[Family] = []
    for name in FAMILY_MODULES:
        families += importlib.import_module(f"kernforge.propose.templates.{name}").FAMILIES
    return families


class BuiltinProposer:
    name = "builtin"
    inline = True  # a move is microseconds of Python: no thread of its own
    concurrency = 1
    repairs = 0  # a failed configuration is moved away from (next_move), not repaired

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def check(self) -> None:
        """Nothing to check: the templates need only the machine."""

    def budget_exhausted(self) -> str | None:
        return None  # it spends nothing but the search's own candidates

    def propose(self, ctx: ProposalContext) -> Proposal | NoProposal:
        """A move from the parent, if the parent is one of this proposer's; an LLM's or a human's
        candidate has no parameters to move, so it is expanded like a first one."""
        parent = ctx.parent.proposal if ctx.parent and ctx.parent.proposal.origin == "builtin" else None
        proposal = self.next_move(ctx.task, ctx.backend, parent, ctx.tried, ctx.failures)
        return proposal or NoProposal("every configuration near this one was tried", "exhausted")

    def why_unsupported(self, task: KernelTask, backend: str) -> str | None:
        reasons = []
        for family in _families():
            facts = family.match(task)
            if isinstance(facts, str):
                reasons.append(facts)
            elif not family.space(facts, backend):
                reasons.append(f"no {backend} template for {family.name}")
            else:
                return None
        # Families that do not know the op at all say so in the same words; the reasons of
        # those that know it but not this case (a layout, a dtype) are the ones worth reading.
        generic = f"no built-in template for {task.op}"
        specific = list(dict.fromkeys(r for r in reasons if r != generic))
        return "; ".join(specific) or generic

    def next_move(self, task: KernelTask, backend: str, parent: Proposal | None,
                  tried: list[Proposal], failures: Sequence[Failure] = ()) -> Proposal | None:
        """A new candidate expanding `parent` (None: a first one), or None when nothing is left.
        `tried` holds every proposal so far; `failures` the ones that failed, and why."""
        family, facts = self._family_for(task)
        failed_moves = {(name, _key(value)): f.status for f in failures
                        if len(f.proposal.changes) == 1 for name, value in f.proposal.changes.items()}
        space = family.space(facts, backend)
        seen = {p.source for p in tried}

        def fresh(params: dict[str, Any]) -> bool:
            return family.valid(facts, backend, params) and family.render(facts, backend, params) not in seen

        if parent is None:
            params = family.initial(facts, backend)
            if fresh(params):
                return self._proposal(family, facts, backend, params, {},
                                      "starting point: " + _describe(params))
            parent_params = params
        else:
            parent_params = parent.params
        suspects = _never_passed(tried, failures)
        move = self._neighbour(space, parent_params, fresh, failed_moves, suspects)
        if move is not None:
            name, new = move
            params = {**parent_params, name: new}
            why = f"{name} {parent_params[name]} -> {new}: {family.explain(name, parent_params[name], new)}"
            status = failed_moves.get((name, _key(new)))
            if status:
                why += f" (this move failed before as {status}; every other move is tried)"
            away = suspects.get((name, _key(parent_params[name])))
            if away:
                why += f" ({name}={parent_params[name]} failed {away} times and never passed: moving away from it)"
            return self._proposal(family, facts, backend, params, parent_params, why)
        jump = self._nearest_untried(space, parent_params, fresh)
        if jump is None:
            return None
        return self._proposal(family, facts, backend, jump, parent_params,
                              "every neighbour tried; jump to the nearest untried point: " + _describe(jump))

    def _family_for(self, task: KernelTask) -> tuple[Family, dict[str, Any]]:
        for family in _families():
            facts = family.match(task)
            if not isinstance(facts, str):
                return family, facts
        raise ValueError(f"no family matches {task.op}")

    def _proposal(self, family: Family, facts: dict[str, Any], backend: str, params: dict[str, Any],
                  parent_params: dict[str, Any], rationale: str) -> Proposal:
        changes = {k: v for k, v in params.items() if k not in parent_params or parent_params[k] != v}
        return Proposal(source=family.render(facts, backend, params), rationale=rationale,
                        params=dict(params), changes=changes)

    def _neighbour(self, space: dict[str, list[Any]], params: dict[str, Any],
                   fresh: Callable[[dict[str, Any]], bool], failed_moves: dict[tuple[str, str], str],
                   suspects: dict[tuple[str, str], int]) -> tuple[str, Any] | None:
        moves = []
        for name, values in space.items():
            near = [v for v in values if _steps(values, params[name], v) == 1]
            moves += [(name, v) for v in near if fresh({**params, name: v})]
        # A parent holding a value that has only ever failed (a variant that does not compile
        # here, say) first moves that value away: tweaking its numbers would fail the same way.
        # The most-failed value first, ties in the space's order (structure before numbers).
        away = [m for m in moves if (m[0], _key(params[m[0]])) in suspects and (m[0], _key(m[1])) not in suspects]
        if away:
            worst = max(suspects[(name, _key(params[name]))] for name, _ in away)
            first = next(name for name in space if suspects.get((name, _key(params[name]))) == worst
                         and any(m[0] == name for m in away))
            return self.rng.choice([m for m in away if m[0] == first])
        untainted = [m for m in moves if (m[0], _key(m[1])) not in failed_moves]
        pool = untainted or moves
        return self.rng.choice(pool) if pool else None

    def _nearest_untried(self, space: dict[str, list[Any]], params: dict[str, Any],
                         fresh: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        # Nearest first (a stable sort: ties in the space's order), then the first fresh one.
        by_distance = sorted(_all_points(space), key=lambda c: sum(_steps(space[n], params[n], c[n]) for n in space))
        return next((c for c in by_distance if fresh(c)), None)


def _steps(values: list[Any], a: Any, b: Any) -> int:
    """How many moves apart two values of a parameter are: named choices (a variant, a layout)
    have no order, so any other one is one move away; numbers and flags go one step at a time."""
    if all(isinstance(v, str) for v in values):
        return int(a != b)
    return abs(values.index(a) - values.index(b))


def _never_passed(tried: Sequence[Proposal], failures: Sequence[Failure]) -> dict[tuple[str, str], int]:
    """(parameter, value) pairs in at least two failures and in no other proposal (a pending one
    counts as not failed): how many failures each is in."""
    failed_sources = {f.proposal.source for f in failures}
    counts = Counter((name, _key(value)) for f in failures for name, value in f.proposal.params.items())
    others = {(name, _key(value)) for p in tried if p.source not in failed_sources for name, value in p.params.items()}
    return {pair: n for pair, n in counts.items() if n >= 2 and pair not in others}


def _all_points(space: dict[str, list[Any]]):
    points: list[dict[str, Any]] = [{}]
    for name, values in space.items():
        points = [{**p, name: v} for p in points for v in values]
    return points


def _key(value: Any) -> str:
    return repr(value)  # parameter values may be unhashable (lists); their repr is stable


def _describe(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())
