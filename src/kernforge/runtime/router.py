"""Installed kernels: an ATen op routed to a proved kernel where a guard holds, else the original.

This file needs only torch (and triton for Triton kernels): kernforge's `patch` uses it, and
`kernforge export` copies it, with the rest of the runtime, into every exported package, so that
a package installs the same way without kernforge.

How a call is routed. For each installed op, a Python kernel is registered on the ATen op
(torch.library, dispatch keys Autograd<Device> and <Device>); ops that were not patched are
untouched and cost nothing. The router checks the guard: the device, dtype, shape, strides
and 16-byte alignment of every tensor and every non-tensor argument, as the kernel was
proved on; and that autograd does not need the op (grad enabled and an input requiring
grad sends it to the original, whose backward is recorded). Where the guard holds on plain
tensors, the kernel runs directly; on a subclass or fake tensors (torch.compile tracing) the
call becomes the registered custom op `kernforge::<name>`, which has a fake implementation,
so that the compiled graph holds it. Anything else calls the original kernel of that
dispatch key, taken from the dispatcher before the override. Removing the registrations
(Installation.remove) puts the dispatcher back exactly as it was.

Two keys, because each misses calls the other sees: under inference_mode the Autograd keys
are skipped, and compile's tracing (fake tensors) never reaches the backend key.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch._subclasses.fake_tensor import is_fake

from . import dispatch
from .importing import import_path
from .kernels import (ALIGNMENT, CURRENT, NAMESPACE, RUNNING, STATE, KernelSpec, RouteCounts, custom_op, dtype_named,
                      flat, grad_needed, make_guard, make_rebuild, plain, resolve, run_kernel, runnable_here, tensor_metas)
from .loading import Loading
from .native_abi import bind_entry, call_entry, empty_like_meta


def load_entry(loading: Loading, path: Path, outputs: list[dict[str, Any]]) -> Callable[..., Any]:
    """The installed callable of a kernel file, as its backend's loading says (loading.py)."""
    return LOADERS[loading.artefact](path, outputs, loading.device)


def _module_entry(path: Path, outputs: list[dict[str, Any]], device: str) -> Callable[..., Any]:
    """A Python module's kf_forward, which allocates its own outputs."""
    entry = getattr(import_path(path, "kf_installed"), "kf_forward", None)
    if callable(entry):
        return entry
    raise RuntimeError(f"{path} defines no kf_forward")


def _library_entry(path: Path, outputs: list[dict[str, Any]], device: str) -> Callable[..., Any]:
    """A compiled library's kf_forward writing into freshly allocated outputs (never prefilled:
    prefilling is the evaluator's check, not part of a kernel)."""
    native = bind_entry(path)

    def run(*args: Any, **kwargs: Any) -> Any:
        inputs = [t for t in flat((args, kwargs)) if isinstance(t, torch.Tensor)]
        out = [empty_like_meta(m, inputs[0].device if inputs else device) for m in outputs]
        call_entry(native, inputs, out)
        return out[0] if len(out) == 1 else tuple(out)
    return run


LOADERS: dict[str, Callable[[Path, list[dict[str, Any]], str], Callable[..., Any]]] = {
    "module": _module_entry, "library": _library_entry}  # one per loading.ARTEFACTS


def kernel_name(op: str, source: bytes) -> str:
    """`_softmax_3f2a9c1b`: the op's base name and a hash of the kernel's source (a chain's
    name, 'chain:mul+add+_softmax', as chain_mul_add__softmax, cut at 48 characters)."""
    base = re.sub(r"\W", "_", op.split("::")[-1].split(".")[0]).strip("_")[:48] or "op"
    return f"{base}_{hashlib.sha256(source).hexdigest()[:10]}"


# ---------------------------------------------------------------------------- custom ops

def _original_of(spec: KernelSpec) -> Callable[..., Any]:
    """What the custom op runs where the kernel may not: the ATen op, or the chain's steps."""
    if spec.chain is None:
        return resolve(spec.op)
    plan = _fused().ChainPlan(spec)
    return lambda *inputs: _fused().replay_outputs(plan, list(inputs))


def _fused() -> Any:
    """fused.py, imported where a chain is installed (it imports this module)."""
    from . import fused

    return fused


# ---------------------------------------------------------------------------- routing


@dataclass
class Installation:
    specs: list[KernelSpec]
    counts: dict[str, RouteCounts] = field(default_factory=dict)  # per ATen op, and per chain by its name
    routed: list[str] = field(default_factory=list)  # the ATen ops whose calls the routers see
    _libraries: list[Any] = field(default_factory=list, repr=False)
    _plans: dict[str, Any] = field(default_factory=dict, repr=False)  # chain name -> fused.ChainPlan
    module_routes: dict[str, list[Any]] = field(default_factory=dict)  # chain name -> its fused.ModuleRoutes
    _native: list[Any] = field(default_factory=list, repr=False)  # native routers, over the Python ones
    native_ops: list[str] = field(default_factory=list)  # the ATen ops whose calls a native router takes
    # kernel name -> the native router of its custom op (compiled code's calls): counts() gives
    # ([calls that took the C++ entry], calls that went to the Python implementation)
    native_custom_ops: dict[str, Any] = field(default_factory=dict)

    def remove(self) -> None:
        """Take every registration out: the dispatcher and the modules are as before install()."""
        for registration in self._native:
            registration.remove()
        self._native.clear()
        self.native_custom_ops = {}
        # last in, first out: a module two chains were installed at (one module called at two
        # shapes) holds the second's forward over the first's forward and class
        for routes in reversed(list(self.module_routes.values())):
            for route in reversed(routes):
                route.remove()
        self.module_routes = {}
        for lib in self._libraries:
            lib._destroy()
        self._libraries.clear()
        for op in self.routed:
            _forget_resolution(op)
        if self._plans:
            _fused().release_compile_pass(list(self._plans.values()))
            self._plans = {}
        for spec in self.specs:
            if CURRENT.get(spec.name) is spec:
                del CURRENT[spec.name]

    @property
    def active(self) -> bool:
        return bool(self._libraries) or bool(self.module_routes)


def install(specs: list[KernelSpec], model: torch.nn.Module | None = None) -> Installation:
    """Route each spec's ATen op to its kernel where the guard holds. Several specs may share
    an op (one per proved signature): each router tries its own guard, then the next one's.
    With the model, a chain that is exactly some modules' forward becomes their forward (one
    guarded call); it needs placeholders in eager only where a module does not hold it."""
    installation = Installation(specs=list(specs))
    for spec in specs:
        installation.counts.setdefault(spec.op, RouteCounts())
        prepare_native(spec)
    installation._plans = {s.name: _fused().ChainPlan(s) for s in specs if s.chain}
    _fused().link_alternatives([(plan, installation.counts[plan.spec.op]) for plan in installation._plans.values()])
    at_modules: set[str] = set()
    for spec in specs:
        if spec.chain and spec.in_eager and model is not None:
            plan = installation._plans[spec.name]
            routes = _fused().module_routes(plan, model, installation.counts[spec.op])
            if routes:
                installation.module_routes[spec.name] = routes
                custom_op(spec, _original_of)
                CURRENT[spec.name] = spec
            if _fused().covers_every_instance(plan, routes):
                at_modules.add(spec.name)
    by_op: dict[str, list[KernelSpec]] = {}
    for spec in specs:
        if spec.name in at_modules:
            continue  # no router: under compile a chain is found in the graph, not at its ops
        for op in spec.routed_ops:
            by_op.setdefault(op, []).append(spec)
    for op, group in by_op.items():
        for spec in group:
            custom_op(spec, _original_of)
            CURRENT[spec.name] = spec
        installation.counts.setdefault(op, RouteCounts())
        installation._libraries.append(_route(op, group, installation))
        installation.routed.append(op)
    if installation._plans:
        _fused().hold_compile_pass(list(installation._plans.values()), installation.counts)
    for spec in specs:
        _native_custom_op(spec, installation)
    return installation


def _native_custom_op(spec: KernelSpec, installation: Installation) -> None:
    """Compiled code calls kernforge::<name>; while the kernel is installed and has a C++ entry,
    that op's kernel on its backend key is a native router too: the tensors' guard, then the
    entry, and anything else the Python implementation (which runs the original where nothing is
    installed). The Python implementation's rebuild, lookup and checks cost more host time a call
    than the kernel's launch."""
    if spec.native is None or not spec.under_compile:
        return
    op = f"{NAMESPACE}::{custom_op(spec, _original_of).__name__}"  # "kernforge::<name>.default"
    key = spec.loading.dispatch_key
    try:
        checks = dispatch.router_checks(resolve(op), tensor_metas(spec.args), spec.devices, ALIGNMENT)
    except dispatch.NotNative:
        return
    registration = dispatch.register_router(op, key, dispatch.snapshot(op, key),
                                           [(checks, spec.native, spec.loading.default_stream_only)])
    installation._native.append(registration)
    installation.native_custom_ops[spec.name] = registration


def _route(op: str, specs: list[KernelSpec], installation: Installation) -> Any:
    backend_key = specs[0].loading.dispatch_key
    namespace, name = op.split("::", 1)
    name = name.removesuffix(".default")  # the dispatcher names a default overload without it
    lib = torch.library.Library(namespace, "IMPL")
    # A chain starts only on plain tensors, which reach the backend key; kept off the Autograd
    # key, its head op's router leaves compile's tracing alone (a fallback there turns a Python
    # number into a tensor constant, and the graph would no longer read as the chain's pattern)
    only_chains = all(spec.chain for spec in specs)
    keys = (backend_key,) if only_chains else (f"Autograd{backend_key}", backend_key)
    native_routes = _native_routes(op, specs, installation._plans)
    originals = {key: dispatch.snapshot(op, key) for key in keys} if native_routes else {}
    for key in keys:
        original = torch._C._dispatch_get_computed_kernel_for_dispatch_key(
            f"{namespace}::{name}", getattr(torch._C.DispatchKey, key))
        with warnings.catch_warnings():  # "Overriding a previously registered kernel": the point
            warnings.filterwarnings("ignore", message=".*[Oo]verrid.*")
            lib.impl(name, _router(op, specs, original, installation), key, with_keyset=True)
    for key in keys if native_routes else ():
        registration = dispatch.register_router(op, key, originals[key], [route for _, route in native_routes])
        installation._native.append(registration)
        installation.counts[op].counters.append((registration, [name for name, _ in native_routes]))
    if native_routes:
        installation.native_ops.append(op)
    _forget_resolution(op)
    return lib


def _native_routes(op: str, specs: list[KernelSpec], plans: dict[str, Any]) -> list[tuple[str, tuple]] | None:
    """The native router's routes for these specs, each (the spec's name, (its guard, its C++
    entry)), or None where one has no native entry or no guard the C++ router can check: then
    the Python router serves the op alone. A chain runs in Python (placeholders), so each of its
    steps on this op that reads only the chain's inputs is a route without an entry: a call that
    step's guard holds goes on to the Python router, and only those; every other call of the op
    (a cast or a mul that no chain starts with) costs the C++ guard, not the Python router. Its
    guard lets through any value of an argument the C++ guard does not read (a cast's device and
    layout): the Python router checks those (tests/test_fused_install.py)."""
    chains = [spec for spec in specs if spec.chain is not None and spec.in_eager]
    if chains and (not dispatch.enabled() or dispatch.native_module() is None):
        return None
    routes: list[tuple[str, tuple]] = []
    for spec in chains:
        for step in plans[spec.name].steps:
            if not (step.source and step.op is resolve(op)):
                continue
            try:
                checks = dispatch.router_checks(step.op, _step_call(step, spec.args), spec.devices, ALIGNMENT,
                                                loose=True)
            except dispatch.NotNative:  # an argument not given nor defaulted: no call of the schema
                return None
            routes.append((spec.name, (checks, None)))
    for spec in specs:
        if spec.chain is not None:
            continue
        if spec.native is None or not spec.in_eager:
            return None
        try:
            routes.append((spec.name, (dispatch.router_checks(resolve(op), spec.args, spec.devices, ALIGNMENT),
                                       spec.native, spec.loading.default_stream_only)))
        except dispatch.NotNative as e:
            spec.native_why = f"no native guard: {e}"
            return None
    return routes or None


def _step_call(step: Any, inputs: list[dict[str, Any]]) -> list[Any]:
    """A chain step's call described as a captured call is (router_checks): its refs to the
    chain's inputs as their proved layouts, its constants as they are."""
    def described(value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {"input"}:
            return inputs[value["input"]]
        if isinstance(value, list):
            return [described(v) for v in value]
        return value

    call = [described(a) for a in step.args]
    return call + [{"kwargs": {k: described(v) for k, v in step.kwargs.items()}}] if step.kwargs else call


def prepare_native(spec: KernelSpec) -> None:
    """spec.native made once, where this machine can build native dispatch; else native_why."""
    if spec.native is not None or spec.native_why is not None:
        return
    if not dispatch.enabled():
        spec.native_why = "turned off (KERNFORGE_NATIVE_DISPATCH=0)"
        return
    try:
        spec.native = dispatch.native_entry(spec, _python_call(spec), lambda: example_inputs(spec))
    except dispatch.NotNative as e:
        spec.native_why = str(e)
    except Exception as e:  # noqa: BLE001 - a kernel that fails here keeps its Python entry, and says why
        spec.native_why = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"


def _python_call(spec: KernelSpec) -> Callable[[list[torch.Tensor]], Any]:
    """The Python entry over the guard's tensors, as the native entry is called."""
    if spec.chain is not None:
        return lambda tensors: spec.entry(*tensors)
    rebuild = make_rebuild(spec.args)

    def call(tensors: list[torch.Tensor]) -> Any:
        args, kwargs = rebuild(tensors)
        return spec.entry(*args, **kwargs)
    return call


def example_inputs(spec: KernelSpec) -> list[torch.Tensor]:
    """Fresh tensors of the proved layouts, on the first device the kernel may run on: normal
    draws; integer tensors zero (a valid index into any dimension), booleans drawn."""
    device = sorted(spec.devices, key=str)[0] if spec.devices else torch.device("cpu")
    tensors = []
    for meta in tensor_metas(spec.args):
        t = torch.empty_strided(meta["shape"], meta["stride"], dtype=dtype_named(meta["dtype"]), device=device)
        tensors.append(t.normal_() if t.is_floating_point() else t.random_(0, 2) if t.dtype == torch.bool
                       else t.zero_())
    return tensors


def _forget_resolution(op: str) -> None:
    """torch's Python dispatcher (on while torch.compile traces) caches which kernel serves each
    dispatch key of an op; an entry made before a registration changed would keep serving the
    old kernel (a model compiled unpatched, then patched, traced without the router)."""
    cache = getattr(resolve(op), "_dispatch_cache", None)
    if cache is not None:
        cache.clear()


def _router(op_name: str, specs: list[KernelSpec], original: Any, installation: Installation) -> Callable:
    """The chains this op starts first (fused.start: placeholders in eager; under compile a
    chain is found in the graph, not here), then the single ops' routes."""
    op = resolve(op_name)
    counts = installation.counts[op_name]
    routes = [(spec, make_guard(spec.args), custom_op(spec, _original_of)) for spec in specs if spec.chain is None]
    chains = [(installation._plans[spec.name], installation.counts[spec.op]) for spec in specs
              if spec.chain and spec.in_eager]
    enter = _fused().enter if chains else None
    rewrap = _scalar_rewrapper(op._schema)

    def route(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if chains and not RUNNING[0]:
            entered = enter(chains, op, args, kwargs)
            if entered is not None:
                return entered
        for spec, guard, kernel_op in routes if not RUNNING[0] else ():
            tensors = guard(args, kwargs)
            if tensors is None or grad_needed(tensors):
                continue
            if all(plain(t) for t in tensors):
                if spec.in_eager and runnable_here(spec, tensors):
                    counts.took(spec.name)
                    return run_kernel(spec, args, kwargs, tensors)
            elif spec.under_compile and all(is_fake(t) for t in tensors):
                counts.custom_op += 1
                counts.traced_by_kernel[spec.name] = counts.traced_by_kernel.get(spec.name, 0) + 1
                return kernel_op(*tensors)
        counts.fell_back()
        if rewrap is not None:
            args, kwargs = rewrap(args, kwargs)
        return original.call_boxed(keyset, *args, **kwargs)
    return route


def _scalar_rewrapper(schema: Any) -> Callable[[tuple, dict], tuple[tuple, dict]] | None:
    """A Python number where the schema takes a Tensor (`x + 0` reaches add.Tensor with a
    wrapped-number tensor, which torch hands a Python kernel as the number) made a 0-dim tensor
    again, for the original kernel's boxed call, which takes no numbers for tensors. Its dtype
    keeps the op's type promotion: a wrapped number never lifts a tensor of its category or
    above (kept in 64 bits, as torch keeps it), and lifts a lower one to what torch.result_type
    says (an int tensor plus 0.5 is float32, not float64). None where the op has no Tensor
    argument a number could stand for."""
    positions = {i: a.name for i, a in enumerate(schema.arguments) if _takes_tensor(a.type)}
    if not positions:
        return None

    def value_at(i: int, name: str, args: tuple, kwargs: dict) -> Any:
        return args[i] if i < len(args) else kwargs.get(name)

    def rewrap(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        # every fallback pays this check: one type lookup per Tensor argument
        numbers = [(i, n) for i, n in positions.items() if type(value_at(i, n, args, kwargs)) in _WIDE]
        if not numbers:
            return args, kwargs
        tensors = [t for t in flat((args, kwargs)) if isinstance(t, torch.Tensor)]
        args, kwargs = list(args), dict(kwargs)
        for i, name in numbers:
            if i < len(args):
                args[i] = _as_tensor(args[i], tensors)
            else:
                kwargs[name] = _as_tensor(kwargs[name], tensors)
        return tuple(args), kwargs
    return rewrap


def _takes_tensor(kind: Any) -> bool:
    if isinstance(kind, torch._C.OptionalType):
        kind = kind.getElementType()
    return isinstance(kind, torch._C.TensorType)


_WIDE = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}


def _as_tensor(value: Any, tensors: list[torch.Tensor]) -> torch.Tensor:
    dtype = _WIDE[type(value)]
    if tensors:
        promoted = torch.result_type(tensors[0], value)
        if promoted != tensors[0].dtype:  # the number lifts the tensor: take what torch would
            dtype = promoted
    return torch.tensor(value, dtype=dtype)


# ---------------------------------------------------------------------------- compiled code

# Compiled code made while installed holds the custom ops, and code made before does not: a
# user of install() (kernforge.patch, an exported package) drops both when the routing
# changes, so that the next call compiles under the routing in force; install() itself does
# not, because timing loops install and remove around compiled code they keep. The on-disk
# caches are off while anything holds them: their keys do not see the dispatcher, so an
# artifact made while installed could be loaded by a process without the routes, and the
# reverse.
_CACHE_FLAGS = (("torch._inductor.config", "fx_graph_cache"),
                ("torch._functorch.config", "enable_autograd_cache"))


def disable_compile_caches() -> None:
    """Hold the on-disk compile caches off; the first hold in the process saves the flags."""
    STATE.cache_holds += 1
    if STATE.cache_holds > 1:
        return
    for module_name, flag in _CACHE_FLAGS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if hasattr(module, flag):
            STATE.saved_flags[(module_name, flag)] = getattr(module, flag)
            setattr(module, flag, False)


def restore_compile_caches() -> None:
    """Release one hold; the last one puts the saved flags back."""
    STATE.cache_holds = max(0, STATE.cache_holds - 1)
    if STATE.cache_holds:
        return
    for (module_name, flag), value in STATE.saved_flags.items():
        setattr(importlib.import_module(module_name), flag, value)
    STATE.saved_flags.clear()


@contextlib.contextmanager
def compile_caches_off() -> Iterator[None]:
    """The on-disk compile caches off for a block that compiles under changing routes."""
    disable_compile_caches()
    try:
        yield
    finally:
        restore_compile_caches()


def reset_compiled_code() -> None:
    if "torch._dynamo" in sys.modules:  # nothing was compiled if dynamo was never imported
        sys.modules["torch._dynamo"].reset()
