"""What apply measured of the routes, in its report (apply.json's `routing` and `graph_routes`).

RouteCost is integrate.overhead's measure of one kernel: the host's time per call through its
route, beside the calls it replaces. RoutedCalls is where an installed op's calls went while a
graphed way was captured. Both write the keys apply.json always had; from_json reads the files of
earlier kernforges, which lacked some fields (their defaults say which).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

# op: the ATen op's router; placeholders: a chain's steps; module: a module's forward; modules: a
# sequence of modules' calls (the first's guard, the last's kernel)
RouteVia = Literal["op", "placeholders", "module", "modules"]


@dataclass(frozen=True)
class RouteCost:
    """One kernel's route, host time per call (us), each the median over the measure's rounds."""

    op: str
    kernel: str
    direct_us: float  # the kernel's own entry called directly (its C++ one where it has one): a hit's floor
    # the unpatched call on the proved inputs: what a routed hit replaces (None: a file from before it was timed)
    aten_us: float | None
    routed_hit_us: float  # the patched ATen op on the proved inputs: guard, then the kernel
    original_us: float  # the unpatched ATen op on inputs the guard refuses
    routed_miss_us: float  # the patched ATen op on the same refused inputs: guard, then the original
    unpatched_op_us: float  # an op nobody patched (add), with no routes installed
    unpatched_op_patched_us: float  # the same op with every route installed
    via: RouteVia = "op"
    native: bool = False  # the hit's guard and launch ran in C++ (dispatch.py), not in Python
    python_direct_us: float | None = None  # the kernel's Python entry called directly, where it has a C++ one
    # the shortest burst of any kind (a slow call's is cut short); None: a file from before bursts were sized
    fewest_burst_calls: int | None = None
    # how far the rounds of a hit and its direct call (of a miss and the original) spread, max - min
    # of either: an overhead smaller than this was not measured (a 2-4 ms CPU kernel's bursts of 6
    # calls spread by milliseconds); None: a file from before the spread was kept
    hit_spread_us: float | None = None
    miss_spread_us: float | None = None

    @property
    def hit_overhead_us(self) -> float:
        return self.routed_hit_us - self.direct_us

    @property
    def miss_overhead_us(self) -> float:
        return self.routed_miss_us - self.original_us

    @property
    def hit_vs_aten(self) -> float | None:
        """A routed hit's host time over the call it replaces' (<= 1: the route costs no more)."""
        if self.aten_us is None:
            return None
        return self.routed_hit_us / self.aten_us if self.aten_us > 0 else float("inf")

    def to_json(self) -> dict[str, Any]:
        derived = {"hit_overhead_us": self.hit_overhead_us, "miss_overhead_us": self.miss_overhead_us}
        if self.aten_us is not None:
            derived["hit_vs_aten"] = self.hit_vs_aten
        return asdict(self) | derived

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RouteCost:
        """The derived figures (hit_overhead_us, ...) are made again from the measured ones."""
        known = {f.name for f in fields(cls)}
        return cls(**{"aten_us": None} | {k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class RoutedCalls:
    """Calls of one installed op (an ATen op, or a chain by its name) by where they went."""

    kernel: int = 0  # ran a kernel directly (eager)
    custom_op: int = 0  # became the custom op (tracing under torch.compile)
    fallback: int = 0  # ran the original op
    by_kernel: dict[str, int] = field(default_factory=dict)  # `kernel`'s calls, per kernel name
    traced_by_kernel: dict[str, int] = field(default_factory=dict)  # `custom_op`'s, per kernel name

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RoutedCalls:
        return cls(kernel=int(data.get("kernel", 0)), custom_op=int(data.get("custom_op", 0)),
                   fallback=int(data.get("fallback", 0)), by_kernel=dict(data.get("by_kernel") or {}),
                   traced_by_kernel=dict(data.get("traced_by_kernel") or {}))
