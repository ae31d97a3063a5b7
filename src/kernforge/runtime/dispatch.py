"""Native dispatch: an installed kernel's guard and launch in C++, so that a routed call costs
about what the ATen call it replaces costs in host time.

The Python router (router.py) spends tens of microseconds a call in the interpreter: its guard,
the argument rebuild and, for Triton, triton's own launcher. dispatch.cpp, built here with the
machine's C++ compiler against the torch that runs here (once per torch version, cached), does
the same work without Python:

- an Entry per kernel: a compiled library's kf_forward called through its function pointer, or
  a Triton kernel's launches recorded once on the proved layout (launch_plan below) and replayed
  with cuLaunchKernel on the current stream, outputs through torch's caching allocator, no host
  sync (so a CUDA graph can capture it). Each entry is checked against the Python entry on fresh
  inputs before it is used, and is used only where that check holds;
- a router per ATen op and dispatch key, over the Python one: the proved calls' guards checked
  on the dispatcher's stack, the entry run where one holds, else the kernel that served the key
  before kernforge; calls carrying the Python key (fake tensors under torch.compile, subclasses)
  go on to the Python router;
- a module entry per module a chain is installed at (fused.py): the entry's guard on tensors
  gathered from the module call's arguments and its parameters' dicts, its calls counted.

Where nothing can be built (no compiler, a torch without the headers), the Python router serves
alone and one warning line says so. KERNFORGE_NATIVE_DISPATCH=0 turns this off.

This file needs only torch (and triton for Triton kernels): it ships in exported packages.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import struct
import subprocess
import sysconfig
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SOURCE = Path(__file__).with_name("dispatch.cpp")
MODULE_NAME = "kernforge_dispatch"
PREBUILT = "prebuilt"  # an exported package's builds, by source, torch and Python
_STATE: dict[str, Any] = {}  # "module": the loaded extension or None, "why": why not


def enabled() -> bool:
    return os.environ.get("KERNFORGE_NATIVE_DISPATCH", "1") != "0"


def native_module() -> Any | None:
    """The built extension, or None (with one warning line per process) where it cannot be built."""
    if "module" not in _STATE:
        try:
            _STATE["module"], _STATE["why"] = _load(_built_library()), None
        except Exception as e:  # noqa: BLE001 - any failure means the Python router, said once
            why = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            _STATE["module"], _STATE["why"] = None, why
            warnings.warn(f"kernforge: native dispatch is not available here ({why}); installed kernels route "
                          "through Python, tens of microseconds more a call. Install g++ (or set CXX) to build it",
                          RuntimeWarning, stacklevel=2)
    return _STATE["module"]


def why_not_native() -> str | None:
    return _STATE.get("why")


def _cache_root() -> Path:
    """KERNFORGE_DISPATCH_CACHE, else the user's cache: one build per machine and torch."""
    folder = os.environ.get("KERNFORGE_DISPATCH_CACHE")
    if folder:
        return Path(folder)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kernforge"


def _compile_command(output: Path) -> list[str]:
    from torch.utils.cpp_extension import include_paths

    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("no C++ compiler (g++) on PATH")
    torch_lib = Path(torch.__file__).parent / "lib"
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [compiler, "-O2", "-shared", "-fPIC", "-std=c++20", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            f"-DTORCH_EXTENSION_NAME={MODULE_NAME}", *[f"-I{p}" for p in include_paths()],
            f"-I{sysconfig.get_paths()['include']}", str(SOURCE), "-o", str(output), f"-L{torch_lib}",
            "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python", f"-Wl,-rpath,{torch_lib}"]


def _library_under(root: Path) -> Path:
    """Where the build for this source, torch and Python lives under `root`."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]  # the interpreter's ABI (cpython-311-x86_64-linux-gnu)
    key = hashlib.sha256(SOURCE.read_bytes() + torch.__version__.encode() + suffix.encode()).hexdigest()[:16]
    return root / f"dispatch-{key}" / f"{MODULE_NAME}{suffix}"


def _built_library() -> Path:
    """dispatch.cpp compiled for this torch and Python ABI, once per (source, torch, ABI): ~23 s.
    An exported package ships the build it was made with (PREBUILT beside this file), taken
    where its torch and Python are the ones here."""
    shipped = _library_under(SOURCE.parent / PREBUILT)
    if shipped.exists():
        return shipped
    library = _library_under(_cache_root())
    if library.exists():
        return library
    library.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=library.parent, prefix="build_") as scratch:
        tmp = Path(scratch) / library.name
        proc = subprocess.run(_compile_command(tmp), capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            (library.parent / "build.log").write_text(proc.stdout + proc.stderr)
            first = next((line for line in proc.stderr.splitlines() if "error" in line), proc.stderr[:200])
            raise RuntimeError(f"dispatch.cpp did not build: {first.strip()}")
        tmp.replace(library)  # atomic: another process never loads a half-written library
    return library


def shippable_library() -> tuple[Path, Path] | None:
    """(the library, its path relative to this folder in a package) for an export to ship
    prebuilt; None where native dispatch cannot be built here."""
    if not enabled() or native_module() is None:
        return None
    library = _built_library()
    return library, _library_under(Path(PREBUILT))


def _load(library: Path) -> Any:
    spec = importlib.util.spec_from_file_location(MODULE_NAME, library)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------- entries


class NotNative(Exception):
    """Why a kernel keeps its Python entry (a value for the caller, never shown as a failure)."""


def native_entry(spec: Any, python_call: Callable[[list[torch.Tensor]], Any],
                 example_inputs: Callable[[], list[torch.Tensor]]) -> Any:
    """The C++ entry of an installed kernel (taking its tensors in guard order, returning its
    outputs), proved against its Python entry (python_call: the same tensors in, the same
    outputs out) on two fresh sets of inputs; raises NotNative."""
    module = native_module()
    if module is None:
        raise NotNative(why_not_native() or "not built")
    if spec.loading.artefact == "library":
        plan = library_plan(spec)
    else:  # a module's kernels are read off the launches its Python entry makes
        plan = triton_plan(spec, python_call, example_inputs)
    entry = module.make_entry(plan)
    for _ in range(2):
        inputs = example_inputs()
        expected = _as_list(python_call(inputs))
        got = _as_list(entry(*inputs))
        if not _same_outputs(expected, got, python_call, inputs):
            raise NotNative("its native entry's outputs differ from the Python entry's")
    return entry


def library_plan(spec: Any) -> dict[str, Any]:
    """A compiled library's plan: its outputs allocated as proved, kf_forward called directly."""
    if spec.library is None:
        raise NotNative("no compiled library")
    import ctypes

    # kept, so that the library stays loaded as long as the process may call it
    handle = _LIBRARIES.setdefault(str(spec.library), ctypes.CDLL(str(spec.library)))
    address = ctypes.cast(handle.kf_forward, ctypes.c_void_p).value
    device = _device_of(spec)
    allocs = [_alloc(m) for m in spec.outputs]
    return {"kind": 1, "device": device, "allocs": allocs, "outputs": list(range(len(allocs))),
            "launches": [], "steps": [], "library_fn": address or 0}


_LIBRARIES: dict[str, Any] = {}


def _device_of(spec: Any) -> str:
    devices = sorted(spec.devices, key=str)
    if spec.loading.device == "cpu":
        return "cpu"
    if len(devices) != 1:
        raise NotNative("proved for several GPUs: one entry is made per device")
    return str(devices[0])


def _alloc(meta: dict[str, Any]) -> dict[str, Any]:
    return {"sizes": list(meta["shape"]), "strides": list(meta["stride"]), "dtype": dtype_named(meta["dtype"])}


def _as_list(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _same_outputs(expected: list[torch.Tensor], got: list[torch.Tensor], python_call: Callable[..., Any],
                  inputs: list[torch.Tensor]) -> bool:
    """Bit for bit, NaN where NaN; a kernel whose Python entry differs from itself run twice
    (atomics in another order) within twice that difference."""
    if len(expected) != len(got):
        return False
    if all(_bitwise(e, g) for e, g in zip(expected, got)):
        return True
    again = _as_list(python_call(inputs))
    for e, a, g in zip(expected, again, got):
        if e.shape != g.shape or e.dtype != g.dtype or e.stride() != g.stride():
            return False
        if _bitwise(e, a) or not e.is_floating_point():
            if not _bitwise(e, g):
                return False
            continue
        own = (e.double() - a.double()).abs().nan_to_num(0).max().item()
        if (e.double() - g.double()).abs().nan_to_num(0).max().item() > 2 * own + 1e-12:
            return False
    return True


def _bitwise(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype or a.stride() != b.stride():
        return False
    if a.is_floating_point():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)


# ---------------------------------------------------------------------------- Triton launches

# ATen calls a Triton entry may make around its launches: allocations, views (told by what they
# return: every tensor out aliases a tensor in), and fills of a fresh allocation. Any other is host
# work the replay would skip, so the kernel keeps its Python entry.
_ALLOCS = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"}
_NEW_FILLED = {"zeros": 0, "zeros_like": 0, "new_zeros": 0, "full": 1, "full_like": 1, "new_full": 2}  # value at
_IN_PLACE_FILLS = {"zero_": None, "fill_": 1}  # value at (None: zero)


class _Recorder(TorchDispatchMode):
    """ATen calls during one Triton entry call: fresh allocations (kept alive, so that the
    allocator does not hand a block out twice) and fills; anything else is refused."""

    def __init__(self) -> None:
        super().__init__()
        self.allocs: list[torch.Tensor] = []
        self.events: list[tuple[str, Any]] = []  # ("fill", (tensor, value)) and ("launch", index)
        self.refused: str | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        if name in _ALLOCS or name in _NEW_FILLED:
            self.allocs.append(out)
        if name in _NEW_FILLED:
            self._fill(func, out, args[_NEW_FILLED[name]] if _NEW_FILLED[name] else 0.0)
        elif name in _IN_PLACE_FILLS:
            at = _IN_PLACE_FILLS[name]
            self._fill(func, args[0], args[at] if at else 0.0)
        elif name not in _ALLOCS and not _aliases_an_input(out, args):
            self.refused = self.refused or f"runs {func} on the host side"
        return out

    def _fill(self, func: Any, target: torch.Tensor, value: Any) -> None:
        if isinstance(value, (int, float, bool)):
            self.events.append(("fill", (target, float(value))))
        else:
            self.refused = self.refused or f"fills with a tensor value ({func})"


def _aliases_an_input(out: Any, args: tuple) -> bool:
    """A view: every tensor it returns lives in the storage of a tensor it was given."""
    outs = [out] if isinstance(out, torch.Tensor) else list(out) if isinstance(out, (tuple, list)) else []
    storages = {t.untyped_storage().data_ptr() for t in args if isinstance(t, torch.Tensor)}
    return bool(outs) and all(isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() in storages
                              for o in outs)


def triton_plan(spec: Any, python_call: Callable[[list[torch.Tensor]], Any],
                example_inputs: Callable[[], list[torch.Tensor]]) -> dict[str, Any]:
    """A Triton entry's work on the proved layout, as data: its allocations, fills and kernel
    launches (function handle, grid, warps, shared memory, each parameter a pointer into an
    input or an allocation, or constant bytes). Recorded twice on fresh inputs after a warm-up
    (autotuning, compilation), and used only if both recordings agree."""
    device = _device_of(spec)
    python_call(example_inputs())  # compiles, autotunes, loads the kernels
    first, second = (_record(python_call, example_inputs()) for _ in range(2))
    if first != second:
        raise NotNative("its launches differ from call to call")
    plan = dict(first)
    plan.update(kind=0, device=device, library_fn=0)
    return plan


def _record(python_call: Callable[[list[torch.Tensor]], Any], inputs: list[torch.Tensor]) -> dict[str, Any]:
    try:
        from triton.compiler.compiler import CompiledKernel
    except ImportError:  # a module of another backend, where triton is not installed: no launches to read
        raise NotNative("triton is not installed: no kernel launches to record") from None

    launches: list[tuple[Any, tuple, tuple]] = []
    original = CompiledKernel.launch_metadata

    def recording(kernel: Any, grid: Any, stream: Any, *args: Any) -> Any:
        launches.append((kernel, tuple(grid), args))
        recorder.events.append(("launch", len(launches) - 1))
        return original(kernel, grid, stream, *args)

    recorder = _Recorder()
    CompiledKernel.launch_metadata = recording
    try:
        with recorder:
            out = _as_list(python_call(inputs))
    finally:
        CompiledKernel.launch_metadata = original
    if recorder.refused:
        raise NotNative(recorder.refused)
    if not launches:
        raise NotNative("launched no Triton kernel")
    allocs = recorder.allocs
    outputs = [_index_of_alloc(t, allocs) for t in out]
    sources = [(0, i, t) for i, t in enumerate(inputs)] + [(1, i, t) for i, t in enumerate(allocs)]
    steps = []
    for kind, what in recorder.events:
        if kind == "fill":
            target, value = what
            steps.append((0, _index_of_alloc(target, allocs), value))
        else:
            steps.append((1, what, 0.0))
    return {"allocs": [{"sizes": list(t.shape), "strides": list(t.stride()), "dtype": t.dtype} for t in allocs],
            "outputs": outputs, "steps": steps,
            "launches": [_launch(kernel, grid, args, sources) for kernel, grid, args in launches]}


def _index_of_alloc(t: torch.Tensor, allocs: list[torch.Tensor]) -> int:
    for i, a in enumerate(allocs):
        if a.data_ptr() == t.data_ptr() and a.shape == t.shape and a.stride() == t.stride() and a.dtype == t.dtype:
            return i
    raise NotNative("returns or fills a tensor that is no allocation of its own call (a view, an input, a cache)")


_INT_BYTES = {"i1": 1, "i8": 1, "u1": 1, "u8": 1, "i16": 2, "u16": 2, "i32": 4, "u32": 4, "i64": 8, "u64": 8}


def _launch(kernel: Any, grid: tuple, args: tuple, sources: list[tuple[int, int, torch.Tensor]]) -> dict[str, Any]:
    meta = kernel.metadata
    if getattr(meta, "num_ctas", 1) != 1 or getattr(meta, "launch_cooperative_grid", False) or getattr(
            meta, "launch_pdl", False):
        raise NotNative("a kernel launched with clusters, a cooperative grid or PDL")
    if getattr(meta, "global_scratch_size", 0) or getattr(meta, "profile_scratch_size", 0):
        raise NotNative("a kernel that needs scratch memory")
    signature = list(kernel.src.signature.values())
    if len(signature) != len(args):
        raise NotNative("a launch whose arguments do not follow its signature")
    params = []
    for kind, value in zip(signature, args):
        if kind == "constexpr":
            continue
        params.append(_param(str(kind), value, sources))
    dims = [int(g) for g in grid] + [1] * (3 - len(grid))
    return {"function": int(kernel.function), "grid": dims, "threads": 32 * int(meta.num_warps),
            "shared": int(meta.shared), "params": params}


def _param(kind: str, value: Any, sources: list[tuple[int, int, torch.Tensor]]) -> tuple[int, int, int, int]:
    if kind.startswith("*"):
        address = value.data_ptr() if hasattr(value, "data_ptr") else int(value)
        for source, index, t in sources:
            storage = t.untyped_storage()
            if storage.data_ptr() <= address < storage.data_ptr() + max(1, storage.nbytes()):
                return (source, index, address - t.data_ptr(), 0)
        raise NotNative("a kernel pointer into memory its call neither took nor allocated")
    if kind in _INT_BYTES:
        size = _INT_BYTES[kind]
        return (2, 0, 0, int(value) & ((1 << (8 * size)) - 1))
    if kind in ("fp32", "f32"):
        return (2, 0, 0, struct.unpack("<I", struct.pack("<f", float(value)))[0])
    if kind == "fp64":
        return (2, 0, 0, struct.unpack("<Q", struct.pack("<d", float(value)))[0])
    if kind == "fp16":
        return (2, 0, 0, struct.unpack("<H", struct.pack("<e", float(value)))[0])
    raise NotNative(f"a kernel parameter of type {kind}")


# ---------------------------------------------------------------------------- routers


def router_checks(op: Any, args_desc: list[Any], devices: frozenset[torch.device], alignment: int,
                  loose: bool = False) -> list[dict]:
    """One check per schema argument of the proved call (defaults filled in, as the dispatcher's
    stack holds them); raises NotNative for an argument the C++ guard does not know, or, `loose`,
    lets any value of it pass: for a route that only hands calls on to the Python router, which
    checks them all (a chain's cast names its device and layout, which the guard does not read)."""
    positional, keywords = split_kwargs(args_desc)
    checks = []
    for i, argument in enumerate(op._schema.arguments):
        if i < len(positional) and not argument.kwarg_only:
            desc = positional[i]
        elif argument.name in keywords:
            desc = keywords[argument.name]
        elif argument.has_default_value():
            desc = _described(argument.default_value)
        else:
            raise NotNative(f"argument {argument.name} is neither given nor defaulted")
        try:
            checks.append(_check(desc, str(argument.real_type), devices, alignment))
        except NotNative:
            if not loose:
                raise
            checks.append({"kind": 8})
    return checks


def split_kwargs(args: list[Any]) -> tuple[list[Any], dict[str, Any]]:
    """A captured call's description as (positional, keywords): keywords come last, as {"kwargs": {...}}."""
    if args and isinstance(args[-1], dict) and set(args[-1]) == {"kwargs"}:
        return list(args[:-1]), dict(args[-1]["kwargs"])
    return list(args), {}


def dtype_named(name: str) -> torch.dtype:
    """torch.float32 from "torch.float32" (or "float32"), as descriptions write dtypes."""
    return getattr(torch, name.replace("torch.", ""))


def _described(value: Any) -> Any:
    return repr(value) if isinstance(value, torch.dtype) else value


def _check(desc: Any, kind: str, devices: frozenset[torch.device], alignment: int) -> dict[str, Any]:
    if isinstance(desc, dict) and "shape" in desc:
        dtype = dtype_named(desc["dtype"])
        element = torch.empty((), dtype=dtype).element_size()
        cuda = desc.get("device", "cpu").startswith("cuda")
        return {"kind": 0, "dtype": dtype, "sizes": list(desc["shape"]), "strides": list(desc["stride"]),
                "cuda": cuda, "device_indices": sorted(d.index or 0 for d in devices if d.type == "cuda"),
                "align": alignment // element if alignment % element == 0 else 1}
    if desc is None:
        return {"kind": 1}
    if isinstance(desc, bool):
        return {"kind": 2, "value": int(desc)}
    if isinstance(desc, str) and desc.startswith("torch.") and "ScalarType" in kind:
        dtype = getattr(torch, desc[len("torch."):], None)
        if isinstance(dtype, torch.dtype):
            return {"kind": 6, "dtype": dtype}
    if isinstance(desc, float) or (isinstance(desc, int) and kind.startswith("float")):
        return {"kind": 4, "value": float(desc)}
    if isinstance(desc, int):
        return {"kind": 3, "value": desc}
    if isinstance(desc, list) and all(type(v) is int for v in desc) and "int" in kind.lower():
        return {"kind": 5, "value": list(desc)}
    if isinstance(desc, str) and kind == "str":  # gelu's approximate="tanh"
        return {"kind": 7, "value": desc}
    raise NotNative(f"an argument the native guard does not check ({kind}: {desc!r})")


def guarded_entry(spec: Any, alignment: int) -> Any:
    """The kernel's C++ entry behind a C++ guard on its tensors (each as proved: dtype, shape,
    strides, alignment, device, plain, no gradient wanted): called with the tensors, it returns
    the outputs, or None where one is not as proved. For calls no ATen router holds (a chain at
    its module's forward); raises NotNative where the kernel has no C++ entry."""
    if spec.native is None:
        raise NotNative(spec.native_why or "no native entry")
    checks = [_check(meta, "Tensor", spec.devices, alignment) for meta in spec.args]
    return native_module().make_guarded(checks, spec.native, spec.loading.default_stream_only)


def module_entry(spec: Any, alignment: int, sources: list[tuple[int, Any, str]]) -> Any:
    """guarded_entry at a module's call (fused.module_route): called with the call's positional
    arguments (one tuple), it gathers the kernel's tensors by `sources`, each (an argument's
    position, None, "") or (-1, the dict holding a parameter, its name), read at every call, and
    returns the kernel's first output (what the module returns), or None where a value is missing
    or not as proved; counts() gives ([kernel calls], fallbacks), as a router's registration does.
    Raises NotNative where the kernel has no C++ entry."""
    return native_module().make_module_entry(guarded_entry(spec, alignment), sources)


def module_call(route: Any, module: Any, forward: Any, n_args: int, own_hooks: list[str], global_hooks: list[Any],
                is_compiling: Any, skip: Any) -> Any | None:
    """A routed module's call with its checks in C++ (fused.calling_class), where its route is a
    module_entry; None where it is not (a Python route). Called with (the module, its positional
    arguments, its keywords), it answers `skip` where nn.Module's call must run, else the entry's
    answer."""
    native = native_module() if enabled() else None  # a ModuleEntry exists only where it was built
    if native is None or not isinstance(route, native.ModuleEntry):
        return None
    return native.make_module_call(route, module, forward, n_args, own_hooks, global_hooks,
                                            is_compiling, skip)


def snapshot(op_name: str, key: str) -> Any:
    """The kernel serving the op's key now (taken before kernforge's routers go on)."""
    qualified, _, overload = op_name.partition(".")
    return native_module().snapshot(qualified, "" if overload == "default" else overload, key)


def register_router(op_name: str, key: str, original: Any, routes: list[tuple]) -> Any:
    """The native router on the op's key, over whatever serves it now (the Python router). Each
    route is (its checks, its entry or None, whether the entry runs on the default stream only):
    None hands the calls the checks hold to the Python router; an entry of the default stream
    only is passed over on any other stream."""
    namespace, rest = op_name.split("::", 1)
    name, _, overload = rest.partition(".")
    return native_module().register_router(namespace, name, "" if overload == "default" else overload, key,
                                           original, routes)
