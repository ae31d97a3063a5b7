"""What routing costs the host per call: a call that takes the kernel, one that falls back, and
an op that was not patched at all.

Host time per call over a burst of calls, synchronised once after the burst: on a GPU the
calls only enqueue work, so the burst measures launch and dispatch cost, which is where the
router's Python runs (a burst of 200 stays far below the launch queue's depth).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_map

from kernforge.capture.serialize import extent
from kernforge.integrate import runtime

BURST = 200
REPEATS = 7


@dataclass
class RoutingCost:
    op: str
    kernel: str
    direct_us: float  # the kernel's own entry called directly: the floor of a routed hit
    routed_hit_us: float  # the patched ATen op on the proved inputs: guard, then the kernel
    original_us: float  # the unpatched ATen op on inputs the guard refuses
    routed_miss_us: float  # the patched ATen op on the same refused inputs: guard, then the original
    unpatched_op_us: float  # an op nobody patched (add), with no routes installed
    unpatched_op_patched_us: float  # the same op with every route installed

    @property
    def hit_overhead_us(self) -> float:
        return self.routed_hit_us - self.direct_us

    @property
    def miss_overhead_us(self) -> float:
        return self.routed_miss_us - self.original_us

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "hit_overhead_us": self.hit_overhead_us, "miss_overhead_us": self.miss_overhead_us}


def proved_inputs(spec: runtime.KernelSpec, device: torch.device) -> tuple[list[Any], dict[str, Any]]:
    """A call the guard accepts, made from its description: fresh values in the proved layout
    (normal draws; integer tensors zero, a valid index anywhere)."""
    tensors = []
    for meta in runtime.tensor_metas(spec.args):
        t = torch.empty_strided(meta["shape"], meta["stride"], dtype=runtime._dtype(meta["dtype"]), device=device)
        tensors.append(t.normal_() if t.is_floating_point() else t.zero_())
    return runtime.make_rebuild(spec.args)(tensors)


def refused_inputs(args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The same call with every tensor one element off its alignment: the same op, shapes and
    values, which the guard refuses (the kernel was proved on aligned memory only)."""
    def shift(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        span = torch.empty(extent(x) + 1, dtype=x.dtype, device=x.device)
        moved = torch.as_strided(span, x.shape, x.stride(), 1)
        moved.copy_(x)
        return moved
    return tree_map(shift, (args, kwargs))


def measure(spec: runtime.KernelSpec, all_specs: list[runtime.KernelSpec], device: torch.device) -> RoutingCost:
    op = runtime._resolve(spec.op)
    args, kwargs = proved_inputs(spec, device)
    miss_args, miss_kwargs = refused_inputs(args, kwargs)
    small = torch.randn(64, device=device)
    with torch.no_grad():
        direct = _host_us(lambda: spec.entry(*args, **kwargs), device)
        original = _host_us(lambda: op(*miss_args, **miss_kwargs), device)
        unpatched = _host_us(lambda: torch.add(small, small), device)
        installation = runtime.install(all_specs)
        try:
            hit = _host_us(lambda: op(*args, **kwargs), device)
            miss = _host_us(lambda: op(*miss_args, **miss_kwargs), device)
            unpatched_patched = _host_us(lambda: torch.add(small, small), device)
            counts = installation.counts[spec.op]
        finally:
            installation.remove()
    if counts.kernel == 0:
        raise RuntimeError(f"{spec.name}: the proved inputs did not take the kernel")
    return RoutingCost(op=spec.op, kernel=spec.name, direct_us=direct, routed_hit_us=hit, original_us=original,
                       routed_miss_us=miss, unpatched_op_us=unpatched, unpatched_op_patched_us=unpatched_patched)


def _host_us(call: Callable[[], Any], device: torch.device) -> float:
    """Median over REPEATS bursts of the host's time per call."""
    for _ in range(10):
        call()
    _sync(device)
    per_call = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(BURST):
            call()
        per_call.append((time.perf_counter() - start) / BURST * 1e6)
        _sync(device)
    return statistics.median(per_call)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
