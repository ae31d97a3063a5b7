"""What a family of built-in kernels declares, and the machine facts its rules read.

A family (one folder under propose/families/) says which tasks it takes and the facts
its kernels need; and, in one Writer per backend it has kernels for, its space (the variants
and the parameters each reads), a starting point chosen by a rule from those facts and the
hardware's, and how a point becomes a source (a kernel file with its constants block
rewritten: kernel_file.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernforge.propose.builtin.space import Space
from kernforge.records.task import KernelTask

# Hopper's facts (H100/H200: 132 SMs, 50 MiB of L2), for rules run where no GPU is seen: the
# Triton interpreter, tests, a proposer asked before any baseline measured the machine.
H200_SMS = 132
H200_L2_BYTES = 50 * 2**20


@dataclass(frozen=True)
class Hardware:
    sms: int = H200_SMS
    l2_bytes: int = H200_L2_BYTES

    @classmethod
    def from_facts(cls, facts: dict[str, Any] | None) -> Hardware:
        """From harness/hardware.py's facts (ProposalContext.hardware); Hopper's where absent."""
        facts = facts or {}
        return cls(sms=int(facts.get("multiprocessors") or H200_SMS),
                   l2_bytes=int(facts.get("l2_bytes") or H200_L2_BYTES))


@dataclass(frozen=True)
class Writer:
    """A family's kernels for one backend."""

    # (facts, hardware) -> the space, or None: no kernel for these facts (a case it does not take).
    space: Callable[[dict[str, Any], Hardware], Space | None]
    # (facts, hardware) -> the starting point: the family's rule, a point of the space.
    start: Callable[[dict[str, Any], Hardware], dict[str, Any]]
    # (facts, point) -> the source.
    render: Callable[[dict[str, Any], dict[str, Any]], str]


class Writers(dict[str, Writer]):
    """A family's writers by backend name: a backend missing here is one the family writes no
    kernels for, and that is said nowhere else."""

    def space(self, facts: dict[str, Any], backend: str, hw: Hardware) -> Space | None:
        """The backend's space for these facts, or None where the family has no kernel for them."""
        writer = self.get(backend)
        return writer.space(facts, hw) if writer else None

    def start(self, facts: dict[str, Any], backend: str, hw: Hardware) -> dict[str, Any]:
        return self[backend].start(facts, hw)

    def render(self, facts: dict[str, Any], backend: str, point: dict[str, Any]) -> str:
        return self[backend].render(facts, point)


@dataclass(frozen=True)
class Family:
    name: str
    # task -> facts the kernels need (shapes, dtype...), or a string saying why not.
    match: Callable[[KernelTask], dict[str, Any] | str]
    writers: Writers
    # (parameter, old value, new value) -> why the move might help.
    explain: Callable[[str, Any, Any], str]

    def space(self, facts: dict[str, Any], backend: str, hw: Hardware) -> Space | None:
        return self.writers.space(facts, backend, hw)

    def start(self, facts: dict[str, Any], backend: str, hw: Hardware) -> dict[str, Any]:
        return self.writers.start(facts, backend, hw)

    def render(self, facts: dict[str, Any], backend: str, point: dict[str, Any]) -> str:
        return self.writers.render(facts, backend, point)


# The families in the order they are asked (packages under propose/families/); a task goes to
# the first that matches it.
FAMILY_PACKAGES = ("chain", "softmax", "row_norm", "group_norm", "batch_norm", "indexed_reduce", "cumsum", "reduce", "pool",
                   "elementwise")


def families() -> list[Family]:
    import importlib

    found: list[Family] = []
    for name in FAMILY_PACKAGES:
        found += importlib.import_module(f"kernforge.propose.families.{name}").FAMILIES
    return found
