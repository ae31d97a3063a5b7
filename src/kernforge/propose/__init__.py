"""propose: where candidate kernels come from.

A proposer is asked, once per search iteration, for one new candidate: either a
first one for a task, or a variation of a node the search chose to expand. It
sees every configuration tried so far, so that it does not repeat itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kernforge.errors import UserError
from kernforge.tasks import KernelTask


@dataclass
class Proposal:
    source: str
    rationale: str  # shown to the user: what this move changes and why it might help
    params: dict[str, Any] = field(default_factory=dict)


class Proposer(Protocol):
    name: str

    def why_unsupported(self, task: KernelTask, backend: str) -> str | None:
        """None if this proposer can write kernels for the task on the backend, else why not."""

    def propose(self, task: KernelTask, backend: str, parent: Proposal | None,
                tried: list[Proposal]) -> Proposal | None:
        """A new candidate expanding `parent` (None: a first one), or None when nothing is left."""


def _builtin() -> Proposer:
    from kernforge.propose.builtin import BuiltinProposer

    return BuiltinProposer()


REGISTRY: dict[str, Callable[[], Proposer]] = {"builtin": _builtin}


def get_proposer(name: str) -> Proposer:
    if name not in REGISTRY:
        raise UserError(f"unknown proposer '{name}'; choose one of: {', '.join(REGISTRY)}")
    return REGISTRY[name]()
