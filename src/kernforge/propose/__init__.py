"""propose: where candidate kernels come from.

A proposer is asked, once per search iteration, for one new candidate: either a
first one for a task, or a variation of a node the search chose to expand. It
sees every configuration tried so far, so that it does not repeat itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kernforge.errors import UserError
from kernforge.tasks import KernelTask


@dataclass
class Proposal:
    source: str
    rationale: str  # shown to the user: what this move changes and why it might help
    params: dict[str, Any] = field(default_factory=dict)
    # The parameters this proposal set differently from its parent (all of them for a first one).
    changes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Failure:
    """A failed approach: what was tried, and how it failed. Proposers are given every one
    so far, so as not to try the same thing again."""

    proposal: Proposal
    status: str  # compile_error | wrong_result | cheat | crash | timeout | ...
    reason: str


class Proposer(Protocol):
    name: str

    def why_unsupported(self, task: KernelTask, backend: str) -> str | None:
        """None if this proposer can write kernels for the task on the backend, else why not."""

    def propose(self, task: KernelTask, backend: str, parent: Proposal | None,
                tried: list[Proposal], failures: Sequence[Failure] = ()) -> Proposal | None:
        """A new candidate expanding `parent` (None: a first one), or None when nothing is left.
        `tried` holds every proposal so far; `failures` the ones that failed, and why."""


def _builtin() -> Proposer:
    from kernforge.propose.builtin import BuiltinProposer

    return BuiltinProposer()


REGISTRY: dict[str, Callable[[], Proposer]] = {"builtin": _builtin}


def get_proposer(name: str) -> Proposer:
    if name not in REGISTRY:
        raise UserError(f"unknown proposer '{name}'; choose one of: {', '.join(REGISTRY)}")
    return REGISTRY[name]()
