"""A proved kernel as the runtime holds it, and one call of it: its spec, the guard that checks
a live call against what it was proved on, the template that rebuilds the call from the guard's
tensors, the custom op compiled graphs call, the counts of where calls went, and running it.

router.py installs kernels on ATen ops and fused.py on chains and modules; both route calls
through what is here, and neither is imported by it. Like them, this file needs only torch, and
`kernforge export` copies it into every exported package.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import dispatch
from .loading import Loading

NAMESPACE = "kernforge"
ALIGNMENT = 16  # bytes: the evaluator proves kernels on fresh allocations, aligned at least this much


@dataclass
class KernelSpec:
    """One installable kernel: what it replaces, what it was proved on, and its entry point."""

    name: str  # the custom op's name in the `kernforge` namespace, unique per kernel source
    op: str  # the ATen overload it replaces, e.g. "aten::_softmax.default"
    args: list[Any]  # the captured call's arguments: tensors as {shape, dtype, stride, device}
    outputs: list[dict[str, Any]]  # the op's outputs: {shape, dtype, stride, device}
    backend: str  # the backend's name, as the run recorded it: for people, never for a decision
    loading: Loading  # what the runtime knows of its backend: device, dispatch key, artefact, stream rule
    entry: Callable[..., Any]  # entry(*args, **kwargs) -> the op's outputs
    devices: frozenset[torch.device] = frozenset()  # where it may run (same GPU model as proved)
    under_compile: bool = True  # False: compile's graph keeps the original op (it pays only in eager)
    in_eager: bool = True  # False: eager calls run the original (it pays only inside compiled graphs)
    # A fused chain's steps and outputs (fused.py): op is then its name ("chain:mul+add+_softmax"),
    # args its inputs' descriptions, outputs the values it keeps; None for a single ATen op.
    chain: dict[str, Any] | None = None
    library: Path | None = None  # the compiled library of a kernel whose artefact is a library
    # The kernel's C++ entry (dispatch.py): its tensors in guard order in, its outputs out; None
    # where it has none, and native_why says why. Made once per spec, at its first install.
    native: Any = field(default=None, repr=False)
    native_why: str | None = None

    @property
    def routed_ops(self) -> list[str]:
        """The ATen ops whose calls the routers see: the op, or the ops of a chain's steps that
        read only the chain's inputs (its first step, and a weight's cast further on), which
        no placeholder reaches."""
        if not self.chain:
            return [self.op]
        sources = [s["op"] for s in self.chain["steps"] if not reads_a_step((s["args"], s["kwargs"]))]
        return list(dict.fromkeys(sources))


def reads_a_step(value: Any) -> bool:
    """Whether a chain step's arguments hold a ref to another step's output."""
    if isinstance(value, dict):
        return set(value) == {"step", "output"} or any(reads_a_step(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(reads_a_step(v) for v in value)
    return False



# ---------------------------------------------------------------------------- guards


def make_guard(args: list[Any]) -> Callable[[tuple, dict], list[torch.Tensor] | None]:
    """A check of a live call against the proved one: the call's tensors (flattened, in order)
    where every argument matches its description, else None. The captured description puts
    keyword arguments last, as {"kwargs": {...}}."""
    positional, keywords = split_kwargs(args)
    checks = [check_for(d) for d in positional]
    keyword_checks = {k: check_for(d) for k, d in keywords.items()}

    def guard(call_args: tuple, call_kwargs: dict) -> list[torch.Tensor] | None:
        if len(call_args) != len(checks) or call_kwargs.keys() != keyword_checks.keys():
            return None
        tensors: list[torch.Tensor] = []
        for check, value in zip(checks, call_args):
            if not check(value, tensors):
                return None
        for key, check in keyword_checks.items():
            if not check(call_kwargs[key], tensors):
                return None
        return tensors
    return guard


split_kwargs = dispatch.split_kwargs


def check_for(desc: Any) -> Callable[[Any, list], bool]:
    if isinstance(desc, dict) and "shape" in desc:
        return tensor_check(desc)
    if isinstance(desc, list):
        items = [check_for(d) for d in desc]
        return lambda v, ts: (isinstance(v, (list, tuple)) and len(v) == len(items)
                              and all(c(x, ts) for c, x in zip(items, v)))
    if desc is None:
        return lambda v, ts: v is None
    if isinstance(desc, bool):
        return lambda v, ts: isinstance(v, bool) and v == desc
    if isinstance(desc, (int, float)):
        kind = float if isinstance(desc, float) else int
        return lambda v, ts: type(v) is kind and v == desc
    if isinstance(desc, str):  # a str argument, or the repr of a dtype, layout, memory format
        return lambda v, ts: (v if isinstance(v, str) else repr(v)) == desc
    return lambda v, ts: False


def tensor_check(desc: dict[str, Any]) -> Callable[[Any, list], bool]:
    shape, stride = torch.Size(desc["shape"]), tuple(desc["stride"])
    dtype, device_type = dtype_named(desc["dtype"]), desc.get("device", "cpu")
    element = torch.empty((), dtype=dtype).element_size()
    alignment = ALIGNMENT // element if ALIGNMENT % element == 0 else 1
    on_cuda, on_cpu = device_type == "cuda", device_type == "cpu"

    def check(v: Any, tensors: list) -> bool:
        # is_cuda and is_cpu are flags, device.type makes a device first (0.07 against 0.32 us)
        if not (isinstance(v, torch.Tensor) and v.dtype == dtype and v.shape == shape and v.stride() == stride
                and (v.is_cuda if on_cuda else v.is_cpu if on_cpu else v.device.type == device_type)):
            return False
        # storage_offset, not data_ptr: it works on fake tensors, and torch's allocator
        # aligns every storage at 512 bytes (CUDA) or 64 (CPU)
        if v.storage_offset() % alignment:
            return False
        tensors.append(v)
        return True
    return check


dtype_named = dispatch.dtype_named


# ---------------------------------------------------------------------------- call templates


def make_rebuild(args: list[Any]) -> Callable[[list[torch.Tensor]], tuple[list[Any], dict[str, Any]]]:
    """The inverse of the guard: (args, kwargs) of the proved call with these tensors in it."""
    positional, keywords = split_kwargs(args)

    def fill(desc: Any, tensors: list[torch.Tensor], at: list[int]) -> Any:
        if isinstance(desc, dict) and "shape" in desc:
            at[0] += 1
            return tensors[at[0] - 1]
        if isinstance(desc, list):
            return [fill(d, tensors, at) for d in desc]
        return decode_arg(desc, tensors)

    def rebuild(tensors: list[torch.Tensor]) -> tuple[list[Any], dict[str, Any]]:
        at = [0]
        call_args = [fill(d, tensors, at) for d in positional]
        return call_args, {k: fill(d, tensors, at) for k, d in keywords.items()}
    return rebuild


def decode_arg(desc: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(desc, str) and desc.startswith("torch."):
        value = getattr(torch, desc[len("torch."):], None)
        if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
            return value
    if isinstance(desc, str) and desc.startswith("device("):
        return tensors[0].device if tensors else torch.device("cpu")
    return desc



STATE_MODULE = "_kernforge_runtime_state_v2"  # a new version for a change of the state's shape


def process_state() -> Any:
    """The registries every copy of this file in a process shares: kernforge's own and one per
    exported package imported. A custom op can be defined once per process, so whichever copy
    defines it first owns it, and its implementation finds the spec another copy installed;
    and the compile caches are held off until the last hold of any copy is released."""
    state = sys.modules.get(STATE_MODULE)
    if state is None:
        state = types.ModuleType(STATE_MODULE, "kernforge runtime: state shared by its copies")
        state.defined, state.current, state.saved_flags, state.cache_holds = {}, {}, {}, 0
        state.chains, state.chain_pass, state.chain_patterns = {}, None, None  # for compile's graph pass (fused.py)
        sys.modules[STATE_MODULE] = state
    return state


STATE = process_state()
DEFINED: dict[str, Any] = STATE.defined  # name -> the Library holding its definition
CURRENT: dict[str, KernelSpec] = STATE.current  # name -> the installed spec its implementation runs


def custom_op(spec: KernelSpec, original_of: Callable[[KernelSpec], Callable[..., Any]]) -> Any:
    """torch.ops.kernforge.<name>.default, defined once per process. Its implementation runs the
    installed kernel while one is installed, else the original (original_of(spec): the ATen op,
    or a chain's steps): a graph compiled while patched keeps calling the custom op after the
    patch is removed."""
    if spec.name not in DEFINED:
        lib = torch.library.Library(NAMESPACE, "FRAGMENT")
        n_tensors = len(tensor_metas(spec.args))
        params = ", ".join(f"Tensor t{i}" for i in range(n_tensors))
        returns = "Tensor" if len(spec.outputs) == 1 else "(" + ", ".join(["Tensor"] * len(spec.outputs)) + ")"
        lib.define(f"{spec.name}({params}) -> {returns}")
        rebuild, original = make_rebuild(spec.args), original_of(spec)
        dispatch_key = spec.loading.dispatch_key
        name, metas = spec.name, spec.outputs

        def implementation(*tensors: torch.Tensor) -> Any:
            args, kwargs = rebuild(list(tensors))
            current = CURRENT.get(name)
            if current is None or RUNNING[0] or not runnable_here(current, tensors):
                return as_declared(original(*args, **kwargs), len(metas))
            return as_declared(run_kernel(current, args, kwargs, list(tensors)), len(metas))

        def fake(*tensors: torch.Tensor) -> Any:
            device = tensors[0].device
            outs = [torch.empty_strided(m["shape"], m["stride"], dtype=dtype_named(m["dtype"]), device=device)
                    for m in metas]
            return outs[0] if len(outs) == 1 else tuple(outs)

        lib.impl(spec.name, implementation, dispatch_key)
        torch.library.register_fake(f"{NAMESPACE}::{spec.name}", fake, lib=lib)
        DEFINED[spec.name] = lib
    return getattr(getattr(torch.ops, NAMESPACE), spec.name).default


def as_declared(out: Any, n_outputs: int) -> Any:
    """A chain's kernel returns a tuple of its outputs; a custom op of one output returns it."""
    return out[0] if n_outputs == 1 and isinstance(out, (tuple, list)) else out



def tensor_metas(desc: Any) -> list[dict[str, Any]]:
    """The tensor descriptions of a call's description, in the order a guard collects them."""
    if isinstance(desc, dict) and "shape" in desc:
        return [desc]
    if isinstance(desc, dict):
        return [m for v in desc.values() for m in tensor_metas(v)]
    if isinstance(desc, list):
        return [m for d in desc for m in tensor_metas(d)]
    return []


def resolve(qualified: str) -> Any:
    namespace, rest = qualified.split("::", 1)
    name, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), name), overload or "default")


def runnable_here(spec: KernelSpec, tensors: Any) -> bool:
    """The checks a guard cannot make on fake tensors, made when the kernel is about to run."""
    if not all(t.device in spec.devices for t in tensors):
        return False
    if spec.loading.default_stream_only:
        return torch.cuda.current_stream(tensors[0].device).cuda_stream == 0
    return True



# ---------------------------------------------------------------------------- counts


class Tally:
    """One route's calls as plain ints, read when its RouteCounts is asked: a module route counts
    with an attribute increment (~25 ns a call on a 2-core x86 CPU, where
    RouteCounts.took's dict update took ~60)."""

    __slots__ = ("fallback", "kernel")

    def __init__(self) -> None:
        self.kernel = 0  # ran the kernel
        self.fallback = 0  # ran the original

    def counts(self) -> tuple[list[int], int]:
        """As a native router's registration counts: (kernel calls per route, fallbacks)."""
        return [self.kernel], self.fallback


class RouteCounts:
    """Calls of one installed op since it was installed, by where they went: those the Python
    routes counted, plus those counted apart (read when asked): its native routers' and its
    module routes' tallies."""

    def __init__(self, custom_op: int = 0, traced_by_kernel: dict[str, int] | None = None) -> None:
        self.custom_op = custom_op  # became the custom op (tracing under torch.compile)
        self.traced_by_kernel = dict(traced_by_kernel or {})  # the custom-op calls, per kernel name
        self._fallback = 0  # ran the original op
        self._by_kernel: dict[str, int] = {}  # ran a kernel directly (eager), per kernel name
        # (a counter with counts() -> (kernel calls per route, fallbacks), its routes' kernels): a
        # native router's registration, or a module route's Tally
        self.counters: list[tuple[Any, list[str]]] = []

    def took(self, kernel: str) -> None:
        self._by_kernel[kernel] = self._by_kernel.get(kernel, 0) + 1

    def fell_back(self) -> None:
        self._fallback += 1

    @property
    def by_kernel(self) -> dict[str, int]:
        merged = dict(self._by_kernel)
        for counter, names in self.counters:
            per_route, _ = counter.counts()
            for name, n in zip(names, per_route):
                if n:
                    merged[name] = merged.get(name, 0) + n
        return merged

    @property
    def kernel(self) -> int:
        return sum(self.by_kernel.values())

    @property
    def fallback(self) -> int:
        return self._fallback + sum(counter.counts()[1] for counter, _ in self.counters)

    def add(self, other: RouteCounts) -> None:
        """Another's calls into this one (a total over phases), those counted apart included."""
        self.custom_op += other.custom_op
        self._fallback += other.fallback
        for name, n in other.by_kernel.items():
            self._by_kernel[name] = self._by_kernel.get(name, 0) + n
        for name, n in other.traced_by_kernel.items():
            self.traced_by_kernel[name] = self.traced_by_kernel.get(name, 0) + n

    def __repr__(self) -> str:
        return (f"RouteCounts(kernel={self.kernel}, custom_op={self.custom_op}, fallback={self.fallback}, "
                f"by_kernel={self.by_kernel}, traced_by_kernel={self.traced_by_kernel})")



# Kernels running now (this process): a kernel that calls the op it replaces (a fallback path
# for a case it does not handle) gets the original, not itself again.
RUNNING = [0]



# ---------------------------------------------------------------------------- helpers


def in_place(func: Any) -> bool:
    """An ATen in-place op (relu_, add_): its name ends in one underscore and its schema writes its
    first argument. Read from the schema, not torch.Tag.inplace, which torch 2.11 does not have."""
    schema = func._schema
    name = schema.name.split("::")[-1]
    first = schema.arguments[0] if schema.arguments else None
    return (name.endswith("_") and not name.endswith("__") and first is not None
            and first.alias_info is not None and first.alias_info.is_write)


def run_kernel(spec: KernelSpec, args: Any, kwargs: Any, tensors: list[torch.Tensor] | None = None) -> Any:
    """The kernel on a call: its C++ entry on the call's tensors where it has one, else its
    Python entry on the call's arguments."""
    RUNNING[0] += 1
    try:
        if spec.native is not None and tensors is not None:
            return spec.native(*tensors)
        return spec.entry(*args, **kwargs)
    finally:
        RUNNING[0] -= 1


PLAIN_TYPES: dict[type, bool] = {}


def plain(t: torch.Tensor) -> bool:
    """A tensor a kernel can take as memory: torch.Tensor or a subclass that does not intercept
    ATen calls (nn.Parameter: a model's weights), not a fake, functional or other dispatching one."""
    kind = type(t)
    plain = PLAIN_TYPES.get(kind)
    if plain is None:
        plain = PLAIN_TYPES[kind] = kind.__torch_dispatch__ is torch.Tensor.__torch_dispatch__
    return plain


def grad_needed(tensors: list[torch.Tensor]) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def flat(value: Any) -> list[Any]:
    """The leaves of nested lists, tuples and dicts: a call's arguments. (torch's pytree took
    two thirds of a refused call's cost in the router: 23 us on a 2-core x86 CPU.)"""
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in flat(v)]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in flat(v)]
    return [value]
