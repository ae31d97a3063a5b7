"""What a family of built-in kernels declares, and the machine facts its rules read.

A family (one folder under propose/families/) says which tasks it takes and the facts
its kernels need; per backend, its space (the variants and the parameters each reads);
a starting point chosen by a rule from those facts and the hardware's; and how a point
becomes a source (a kernel file with its constants block rewritten: kernel_file.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernforge.propose.builtin.space import Space
from kernforge.tasks import KernelTask

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
class Family:
    name: str
    # task -> facts the kernels need (shapes, dtype...), or a string saying why not.
    match: Callable[[KernelTask], dict[str, Any] | str]
    # (facts, backend, hardware) -> the space, or None: no kernels for that backend.
    space: Callable[[dict[str, Any], str, Hardware], Space | None]
    # (facts, backend, hardware) -> the starting point: the family's rule, a point of the space.
    start: Callable[[dict[str, Any], str, Hardware], dict[str, Any]]
    # (facts, backend, point) -> the source.
    render: Callable[[dict[str, Any], str, dict[str, Any]], str]
    # (parameter, old value, new value) -> why the move might help.
    explain: Callable[[str, Any, Any], str]


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
