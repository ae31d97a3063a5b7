"""What routing costs the host per call: a call that takes the kernel, one that falls back, and
an op that was not patched at all.

Host time per call over a burst of calls, synchronised once after the burst: on a GPU the
calls only enqueue work, so the burst measures launch and dispatch cost, which is where the
router's Python runs (a burst of 200 stays far below the launch queue's depth).

A burst runs at most about BURST_HOST_S of host time: its size comes from one timed call before
it (at least MIN_BURST calls, at most BURST). A CPU kernel's call takes milliseconds, and 200
calls of each of ~7 kinds over 7 rounds took 303 s of a 337 s apply on a 2-core x86
CPU (README command 1); a few calls of a millisecond already dwarf the microseconds a route
costs, so the shorter burst loses nothing the figures show. A later burst's warm-up is as
short (at most half its calls). Every call kind is still timed in every round, routes out and
then in, and each figure is the median over the rounds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

from kernforge.harness.serialize import extent
from kernforge.records import RouteCost
from kernforge.runtime import fused, kernels, router

BURST = 200  # calls in a burst of cheap calls (a GPU launch, a routed add): far below the launch queue
BURST_HOST_S = 0.05  # host time one burst may take: 7 kinds x 7 rounds of it is ~2.5 s a kernel
MIN_BURST = 3  # even a slow call is timed over a few, so that one outlier is not the figure
WARM_UP = 5  # calls before a kind's first burst: the allocator and the route's caches settle
REPEATS = 7


def proved_inputs(spec: router.KernelSpec, device: torch.device) -> tuple[list[Any], dict[str, Any]]:
    """A call the guard accepts, made from its description (router.example_inputs on `device`)."""
    tensors = [t.to(device) for t in router.example_inputs(spec)]
    return router.make_rebuild(spec.args)(tensors)


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


def measure(spec: router.KernelSpec, all_specs: list[router.KernelSpec], device: torch.device,
            model: torch.nn.Module | None = None) -> RouteCost:
    """Each cost as the median over REPEATS rounds, each round timing every call with the routes
    out and then in, so that drift (a busy host, clocks) falls on both sides alike. A chain the
    model holds as a module's forward is called as that module, one at a sequence of modules as
    those modules, each given the one before's output."""
    modules = modules_of(spec, model)
    op = call_of(spec, modules)
    args, kwargs = proved_inputs(spec, device)
    miss_args, miss_kwargs = refused_inputs(args, kwargs)
    small = torch.randn(64, device=device)
    router.prepare_native(spec)
    tensors = [t for t in kernels.flat((args, kwargs)) if isinstance(t, torch.Tensor)]
    hit_args, miss_call_args = args, miss_args
    if modules is not None:  # called as the model calls it, its arguments picked once, as direct's are
        hit_args, miss_call_args = module_arguments(spec, args), module_arguments(spec, miss_args)
    native = spec.native
    unrouted = {"direct": (lambda: native(*tensors)) if native is not None else lambda: spec.entry(*args, **kwargs),
                "aten": lambda: op(*hit_args, **kwargs), "original": lambda: op(*miss_call_args, **miss_kwargs),
                "add": lambda: torch.add(small, small)}
    if native is not None:  # the Python entry beside the C++ one it gave way to
        unrouted["python direct"] = lambda: spec.entry(*args, **kwargs)
    routed = {"hit": lambda: op(*hit_args, **kwargs), "miss": lambda: op(*miss_call_args, **miss_kwargs),
              "add routed": lambda: torch.add(small, small)}
    samples: dict[str, list[float]] = {name: [] for name in [*unrouted, *routed]}
    sizes: dict[str, int] = {}  # each kind's burst, sized in its first round and kept for the others
    taken, via_native = 0, False
    with torch.no_grad():
        for _ in range(REPEATS):
            for name, call in unrouted.items():
                samples[name].append(_burst_us(call, device, sizes, name))
            installation = router.install(all_specs, model)
            try:
                for name, call in routed.items():
                    samples[name].append(_burst_us(call, device, sizes, name))
                taken += installation.counts[spec.op].kernel
                # at a sequence the guard is Python's, at the first module: only the launch is C++
                via_native = (spec.chain is None and spec.op in installation.native_ops) or (
                    modules is not None and len(modules) == 1 and native is not None)
            finally:
                installation.remove()
    if taken == 0:
        raise RuntimeError(f"{spec.name}: the proved inputs did not take the kernel")
    m = {name: statistics.median(values) for name, values in samples.items()}
    spread = {name: max(values) - min(values) for name, values in samples.items()}
    return RouteCost(op=spec.op, kernel=spec.name, direct_us=m["direct"], aten_us=m["aten"], routed_hit_us=m["hit"],
                       original_us=m["original"], routed_miss_us=m["miss"], unpatched_op_us=m["add"],
                       unpatched_op_patched_us=m["add routed"],
                       via=("module" if len(modules) == 1 else "modules") if modules
                       else "placeholders" if spec.chain else "op",
                       native=via_native, python_direct_us=m["python direct"] if native is not None else None,
                       fewest_burst_calls=min(sizes.values()),
                       hit_spread_us=max(spread["hit"], spread["direct"]),
                       miss_spread_us=max(spread["miss"], spread["original"]))


def modules_of(spec: router.KernelSpec, model: torch.nn.Module | None) -> list[torch.nn.Module] | None:
    """The first module of the model that holds the chain as its forward, or the modules of the
    first sequence that holds it (one per stage), if any."""
    chain = spec.chain or {}
    if model is None:
        return None
    names = [[name] for name in chain["module"]["names"]] if chain.get("module") else (
        chain["modules"]["names"] if chain.get("modules") else [])
    for sequence in names:
        try:  # a glue stage (an op the forward calls between two modules) has no module: None
            return [model.get_submodule(name) if name is not None else None for name in sequence]
        except AttributeError:
            continue
    return None


def call_of(spec: router.KernelSpec, modules: list[torch.nn.Module] | None = None) -> Callable[..., Any]:
    """What a model calls where the kernel goes: the ATen op, a chain's steps one by one, the
    module whose forward the chain is, or the modules of a sequence in turn (on module_arguments)."""
    if modules is not None and len(modules) == 1:
        return modules[0]
    if modules is not None:
        first, later = modules[0], _later_stages(spec, modules)
        n_head = len(argument_inputs(spec)[0])

        def in_turn(*args: Any) -> Any:
            value, extras, sides = first(*args[:n_head]), args[n_head:], {}
            for stage in later:
                value = stage(value, extras, sides)
            return value
        return in_turn
    if spec.chain is None:
        return kernels.resolve(spec.op)
    steps = fused.ChainPlan(spec).steps
    return lambda *inputs: fused.replay(steps, list(inputs))


def _later_stages(spec: router.KernelSpec, modules: list[torch.nn.Module | None]) -> list[Callable[..., Any]]:
    """Each stage after the first as stage(value, later inputs, side values): its module on the
    value; a side stage's module on its own arguments (module_arguments' tail), its value kept; or a
    glue stage's op on the value, its chain inputs and the side values, as the model calls it."""
    record, steps = (spec.chain or {})["modules"], fused.ChainPlan(spec).steps
    later_inputs = argument_inputs(spec)[1]
    side_of = fused.side_values(record)

    def chain_inputs(extras: tuple) -> list[Any]:
        inputs = [None] * len(spec.args)
        for k, t in zip(later_inputs, extras):
            inputs[k] = t
        return inputs
    stages: list[Callable[..., Any]] = []
    for stage, module in enumerate(modules[1:], start=1):
        if module is not None and stage in side_of.values():
            own = fused.side_arguments(record, stage)

            def side(value: Any, extras: tuple, sides: dict, module: Any = module, own: list[int] = own,
                     stage: int = stage) -> Any:
                inputs = chain_inputs(extras)
                sides[stage] = module(*[inputs[k] for k in own])
                return value
            stages.append(side)
        elif module is not None:
            stages.append(lambda value, _extras, _sides, module=module: module(value))
        else:
            step = steps[int(record["outputs"][stage][0])]

            def glue(value: Any, extras: tuple, sides: dict, step: fused.Step = step) -> Any:
                inputs = chain_inputs(extras)

                def argument(a: Any) -> Any:
                    if not (fused._is_ref(a) and "step" in a):
                        return fused._decode(a, inputs, [])
                    side = side_of.get((a["step"], a["output"]))
                    return value if side is None else sides[side]
                return step.op(*[argument(a) for a in step.args])
            stages.append(glue)
    return stages


def argument_inputs(spec: router.KernelSpec) -> tuple[list[int], list[int]]:
    """The chain inputs the first module's call takes as its positional arguments, in their order,
    and those glue stages take, in the chain's order."""
    chain = spec.chain or {}
    boundary = (chain.get("module") or chain["modules"])["inputs"]
    head = [k for _, k in sorted((int(where[0]), k) for k, (kind, *where) in enumerate(boundary) if kind == "arg")]
    return head, [k for k, (kind, *_) in enumerate(boundary) if kind == "stage"]


def module_arguments(spec: router.KernelSpec, inputs: list[Any]) -> list[Any]:
    """The (first) module's positional arguments among the chain's inputs, in order (its parameters
    are its own), then the glue stages' inputs. Picked once, not at each call: a lambda and a list
    made per call cost 0.4 us of the routed call on a 2-core x86 CPU, where the direct call pays
    neither."""
    head, later = argument_inputs(spec)
    return [inputs[k] for k in head] + [inputs[k] for k in later]


def burst_size(call_s: float) -> int:
    """Calls in a burst that takes about BURST_HOST_S of host time, for a call of `call_s`
    seconds: at least MIN_BURST, at most BURST."""
    if call_s <= 0:
        return BURST
    return max(MIN_BURST, min(BURST, int(BURST_HOST_S / call_s)))


def warm_calls(burst: int) -> int:
    """Calls before a later burst, once the routes were put in or out again: WARM_UP, or half
    the burst where it is shorter (a slow call settles in one, and would double the burst)."""
    return max(1, min(WARM_UP, burst // 2))


def expected_s(kernel_s: float, aten_s: float) -> float:
    """Seconds `measure` is expected to take for a kernel whose call takes `kernel_s` and the
    ATen call it replaces `aten_s` (the search's figures): the kernel's kinds (direct, routed
    hit) and the ATen op's (unpatched, refused, routed miss) over REPEATS rounds, warm-ups
    included; the adds' bursts are microseconds."""
    return sum(_kind_s(call_s) for call_s in (kernel_s, kernel_s, aten_s, aten_s, aten_s))


def _kind_s(call_s: float) -> float:
    n = burst_size(call_s)
    return call_s * (WARM_UP + n + (REPEATS - 1) * (warm_calls(n) + n))


def _burst_us(call: Callable[[], Any], device: torch.device, sizes: dict[str, int], name: str) -> float:
    """The host's time per call over a burst, after a few calls of warm-up; the burst's size is
    sizes[name], or sized from the last of WARM_UP warm-up calls and kept there."""
    if name in sizes:
        n = sizes[name]
        for _ in range(warm_calls(n)):
            call()
        _sync(device)
    else:
        n = sizes[name] = _sized_after_warm_up(call, device)
    start = time.perf_counter()
    for _ in range(n):
        call()
    per_call = (time.perf_counter() - start) / n * 1e6
    _sync(device)
    return per_call


def _sized_after_warm_up(call: Callable[[], Any], device: torch.device) -> int:
    for _ in range(WARM_UP - 1):
        call()
    _sync(device)
    start = time.perf_counter()
    call()  # host time alone, as the burst counts it: on a GPU a launch, not the kernel
    one_s = time.perf_counter() - start
    _sync(device)
    return burst_size(one_s)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
