"""Where the compiled model's time goes: torch.compile's kernels mapped back to the captured ATen ops.

Why: a user who cares about speed runs torch.compile, which fuses most memory-bound ops; a
signature that is hot in eager but that compile already runs at its memory floor is not worth a
search, and one that compile leaves far above it is. So the model is compiled (default mode),
warmed, profiled for a few forwards, and each kernel's time goes back to the signatures it came
from; each candidate then carries its compiled time, its floor and the headroom between them.

How a kernel finds its ops:
  generated   inductor names a fused kernel after the ATen ops its nodes came from, before its
              decompositions (descriptive_names "original_aten", its default, which compile_model
              sets): triton_per_fused_native_group_norm_silu_3, graph_0_cpp_fused__softmax_add_mul_0.
              Those are the ops the capture records, so the name is the mapping. Inductor's
              provenance tracking (trace.provenance_tracking_level) maps kernels to post-grad FX
              nodes instead, which are decomposed (a softmax is amax, sub, exp, sum, div there), and
              its tables are reset after each compile unless the timeline export is on; the name
              reads the same on every torch since 2.0.
  library     gemm, convolution, attention: the ATen op whose profiler event launched the kernel
              (the outermost one a captured signature has, aten::convolution over cudnn_convolution);
              a device kernel with no such event is matched by its name's family (gemm, conv).
Attribution: a kernel's time is split between the signatures whose op it names, by their eager
time; a chain's time is its steps' compiled time for the calls it holds. Time no signature names
is reported as unmapped, by kernel name, never given to a signature.
Limits: a name carries ops, not shapes, so signatures of one op share that op's kernels by eager
time; inductor names a kernel after 10 ops at most (kernel_name_max_ops), and a signature whose op
is past that cut has no compiled time: it is never called at the floor.
"""

from __future__ import annotations

import functools
import math
import os
import re
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from kernforge.errors import UserError

RANK_BY = ("auto", "eager", "compile")
# Forwards profiled after the warm-up; the kernels' times are their sum over these, per forward.
PROFILED_PASSES = {"cuda": 5, "cpu": 3}
# A kernel launch on a GPU costs ~2 us however little it does (inductor's static launcher is
# about 2 us over a bare cuLaunchKernel): no call's floor is below it. A CPU kernel is a call.
LAUNCH_FLOOR_US = {"cuda": 2.0, "cpu": 0.0}
# Bandwidth where none could be measured. Upper bounds on a copy's rate (a current datacenter
# GPU's HBM copies at 3-4 TB/s; a server socket's DRAM at tens of GB/s), so that a floor from them
# is a lower bound and never calls a candidate at its floor that is not.
DEFAULT_BANDWIDTH_GB_S = {"cuda": 5000.0, "cpu": 50.0}
# Peak dense FLOP/s per dtype, upper bounds for the compute floor of a gemm or convolution: a
# current datacenter GPU's tensor cores (~1 PFLOP/s bf16/fp16; fp32 counted at the TF32 rate,
# whether or not TF32 is on); on a CPU 100 GFLOP/s a core (AVX-512 FMA at ~3 GHz is ~100 fp32).
GPU_PEAK_FLOPS = {"torch.bfloat16": 1.0e15, "torch.float16": 1.0e15, "torch.float32": 5.0e14,
                  "torch.float64": 7.0e13}
CPU_PEAK_FLOPS_PER_CORE = 1.0e11
# At the floor: the headroom is under this fraction of the compiled time, or under this many us
# per forward (a search cannot win back what one launch costs).
AT_FLOOR_FRACTION, AT_FLOOR_US = 0.10, 3.0
AT_FLOOR_NOTE = "at the floor under compile"
UNMAPPED_LISTED = 12  # unmapped kernels named in the report, longest first

# triton_per_fused_native_group_norm_silu_3, triton_tem_fused_addmm_0, graph_0_cpp_fused_add_1
_INDUCTOR_KERNEL = re.compile(r"^(?:graph_\d+_)?(?:triton|cpp)_(?:[a-z]+_)?fused(?P<rest>(?:_.*)?)$")
_KERNEL_INDEX = re.compile(r"_\d+$")  # the kernel's number in its graph
# Library kernels by family, where no ATen op's event launched them: cuBLAS/cuBLASLt/CUTLASS
# gemms and cuDNN convolutions, the ops each can stand for.
# Convolutions first: cuDNN's implicit-gemm convolutions have "gemm" in their names too.
_LIBRARY_FAMILIES = (
    (re.compile(r"conv|fprop|dgrad|wgrad|winograd|implicit_gemm", re.I), ("convolution",)),
    (re.compile(r"gemm|gemv|cublas|cutlass|nvjet", re.I), ("mm", "addmm", "bmm", "baddbmm", "linear", "matmul")),
)


@dataclass
class KernelTime:
    """One kernel (or a library call) of the compiled model, with the ATen ops it came from."""

    name: str  # as the profiler names it
    ops: tuple[str, ...]  # ATen op names (overload packets), e.g. ("native_group_norm", "silu")
    us: float  # time per forward
    library: bool = False  # launched by an ATen op: ops are the launching op and the ops under it, outermost first


@dataclass
class CompiledProfile:
    """Where the compiled model's time went, as profile.json keeps it (Capture.compiled)."""

    device: str
    passes: int = 0
    total_us: float = 0.0  # per forward: device time of every kernel on a GPU, the forward's host time on a CPU
    attributed_us: float = 0.0  # of which the captured signatures' kernels
    unmapped: list[dict[str, Any]] = field(default_factory=list)  # {"kernel", "us"}: no signature names it
    bandwidth_gb_s: float = 0.0
    bandwidth_from: str = ""  # "measured" (evaluate.hardware) | "default" (DEFAULT_BANDWIDTH_GB_S)
    launch_floor_us: float = 0.0
    compile_s: float = 0.0  # wall time of the first compiled forward
    error: str = ""  # why there is no compiled ranking ("" when there is)

    @property
    def coverage(self) -> float:
        return self.attributed_us / self.total_us if self.total_us else 0.0


def compile_ranking(choice: str, device_type: str) -> bool:
    """Whether to rank by the compiled model too: `auto` on a GPU only, since compiling a model
    on a small CPU takes tens of seconds (a 3-op attention block: 13 s on 2 cores)."""
    if choice not in RANK_BY:
        raise UserError(f"unknown --rank-by '{choice}'; choose one of: {', '.join(RANK_BY)}")
    return choice == "compile" or (choice == "auto" and device_type == "cuda")


def compile_warning(capture: Any) -> str:
    """One line where the compiled model was to be profiled and could not be ("" otherwise)."""
    error = (capture.compiled or {}).get("error")
    if not error:
        return ""
    return (f"warning: ranking by eager time only: profiling the model under torch.compile failed ({error}); "
            "--rank-by eager skips the attempt")


# ---------------------------------------------------------------- kernel names -> ATen ops

@functools.lru_cache(maxsize=1)
def aten_names() -> frozenset[str]:
    """Every ATen overload packet's name this torch registers: the words of inductor's names."""
    try:
        names = torch._C._dispatch_get_all_op_names()
    except Exception:  # noqa: BLE001 - a torch without it: kernel names split on known ops only
        return frozenset()
    return frozenset(n.split("::", 1)[1].split(".")[0] for n in names if n.startswith("aten::"))


def short_op(op: str) -> str:
    """'aten::native_group_norm.default' or 'extern_kernels.mm' -> the op's name: native_group_norm, mm."""
    name = op.split("::", 1)[-1] if "::" in op else op.rsplit(".", 1)[-1] if op.startswith("extern_kernels.") else op
    return name.split(".")[0]


def inductor_ops(name: str, known: frozenset[str] | set[str] = frozenset()) -> tuple[str, ...] | None:
    """The ATen ops a generated kernel's name lists, or None where it is not inductor's.

    'triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0' -> ('_to_copy', 'add', 'mean', 'mul', 'pow', 'rsqrt')
    """
    match = _INDUCTOR_KERNEL.match(name)
    if match is None:
        return None
    ops = _KERNEL_INDEX.sub("", match.group("rest"))[1:]  # "__to_copy_add_0" -> "_to_copy_add"
    return tuple(split_ops(ops, known | aten_names()))


def split_ops(text: str, known: frozenset[str] | set[str]) -> list[str]:
    """'_to_copy_add_mean' -> ['_to_copy', 'add', 'mean']: op names joined by '_', which op names
    also hold; the split into the fewest known names wins, and a word no op has stays a word (cost
    10, so that any known split is preferred)."""
    words = text.split("_")
    best: list[tuple[float, list[str]] | None] = [None] * (len(words) + 1)
    best[0] = (0.0, [])
    for end in range(1, len(words) + 1):
        for start in range(end):
            if best[start] is None:
                continue
            token = "_".join(words[start:end])
            cost = 1.0 if token in known else 10.0 if end - start == 1 and token else math.inf
            total = best[start][0] + cost
            if best[end] is None or total < best[end][0]:
                best[end] = (total, [*best[start][1], token])
    return [t for t in best[-1][1] if t] if best[-1] else []


def library_ops(kernel: str, launched_by: list[str]) -> tuple[str, ...]:
    """The ops a library kernel stands for: the ATen ops whose events launched it, outermost
    first, else those of its name's family (an unlinked cuBLAS gemm is some matmul)."""
    if launched_by:
        return tuple(short_op(op) for op in launched_by)
    for pattern, ops in _LIBRARY_FAMILIES:
        if pattern.search(kernel):
            return ops
    return ()


def kernel_of(name: str, us: float, launched_by: list[str]) -> KernelTime:
    """One profiled kernel: generated (its name lists its ops) or a library's."""
    ops = inductor_ops(name)
    if ops is not None:
        return KernelTime(name=name, ops=ops, us=us)
    if name.startswith(("aten::", "extern_kernels.")):
        launched_by = [name, *launched_by]
    return KernelTime(name=name, ops=library_ops(name, launched_by), us=us, library=True)


# ---------------------------------------------------------------- attribution

def attribute(kernels: list[KernelTime], profiles: list[Any]) -> tuple[dict[str, float], dict[str, float]]:
    """(signature -> compiled us per forward, kernel name -> unmapped us per forward).

    A generated kernel's time is split between every single-op signature whose op it names; a
    library kernel's goes to the signatures of the outermost launching op one has; both by the
    signatures' eager time (equal parts where all are 0). Chains are not attributed here (chain_us)."""
    by_op: dict[str, list[Any]] = {}
    for p in profiles:
        if p.kind != "chain":
            by_op.setdefault(short_op(p.op), []).append(p)
    compiled: dict[str, float] = {p.signature: 0.0 for p in profiles if p.kind != "chain"}
    unmapped: dict[str, float] = {}
    for kernel in kernels:
        matched = _matching(kernel, by_op)
        if not matched:
            unmapped[kernel.name] = unmapped.get(kernel.name, 0.0) + kernel.us
            continue
        weights = [max(p.time_us, 0.0) for p in matched]
        total = sum(weights)
        for p, w in zip(matched, weights):
            compiled[p.signature] += kernel.us * (w / total if total > 0 else 1.0 / len(matched))
    return compiled, unmapped


def _matching(kernel: KernelTime, by_op: dict[str, list[Any]]) -> list[Any]:
    if kernel.library:
        first = next((op for op in kernel.ops if op in by_op), None)
        return list(by_op[first]) if first else []
    return [p for op in dict.fromkeys(kernel.ops) for p in by_op.get(op, [])]


def chain_us(chain: dict[str, Any], compiled: dict[str, float], calls: dict[str, int]) -> float:
    """A chain's compiled time: each step signature's compiled time for the calls the chain holds."""
    return sum(compiled.get(sig, 0.0) * held / max(1, calls.get(sig, held))
               for sig, held in chain.get("covers", {}).items())


# ---------------------------------------------------------------- floors

def tensor_bytes(meta: dict[str, Any]) -> int:
    """Bytes of the distinct elements a tensor holds (a broadcast dim, stride 0, is read once)."""
    dtype = getattr(torch, str(meta.get("dtype", "")).replace("torch.", ""), None)
    size = dtype.itemsize if isinstance(dtype, torch.dtype) else 4
    stride = meta.get("stride") or [1] * len(meta["shape"])
    return size * math.prod(n for n, s in zip(meta["shape"], stride) if s != 0)


def _tensors(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        return [value] if "shape" in value else [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def bytes_moved(profile: Any) -> int:
    """Every input read once and every output written once, over all calls of one forward."""
    per_call = sum(tensor_bytes(t) for t in _tensors(profile.args) + _tensors(profile.outputs))
    return per_call * max(1, profile.calls)


def flops(profile: Any) -> float:
    """Multiply-adds x 2 of a gemm, convolution or attention, over all calls; 0 for other ops."""
    op, args = short_op(profile.op), [a for a in profile.args if not (isinstance(a, dict) and "kwargs" in a)]
    shapes = [a["shape"] if isinstance(a, dict) and "shape" in a else None for a in args]
    out = profile.outputs[0]["shape"] if profile.outputs and "shape" in profile.outputs[0] else None
    per_call = _op_flops(op, shapes, out)
    return per_call * max(1, profile.calls)


def _op_flops(op: str, shapes: list[list[int] | None], out: list[int] | None) -> float:
    try:
        if op in ("mm", "bmm", "matmul") and out:
            return 2.0 * math.prod(out) * shapes[0][-1]
        if op in ("addmm", "baddbmm", "addbmm") and out:
            return 2.0 * math.prod(out) * shapes[1][-1]
        if op == "linear" and out:
            return 2.0 * math.prod(out) * shapes[0][-1]
        if op in ("convolution", "_convolution", "conv2d", "conv1d", "conv3d") and out:
            weight = shapes[1]
            return 2.0 * math.prod(out) * math.prod(weight[1:])
        if op.startswith(("_scaled_dot_product", "scaled_dot_product")):
            q, k = shapes[0], shapes[1]
            return 4.0 * math.prod(q[:-1]) * k[-2] * q[-1]
    except (IndexError, TypeError):
        return 0.0
    return 0.0


def peak_flops(device_type: str, dtype: str) -> float:
    if device_type == "cuda":
        return GPU_PEAK_FLOPS.get(dtype, GPU_PEAK_FLOPS["torch.float32"])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return CPU_PEAK_FLOPS_PER_CORE * max(1, cores)


def floor_us(profile: Any, device_type: str, bandwidth_gb_s: float) -> float:
    """The least time a forward's calls of this candidate can take: its bytes at the copy
    bandwidth, its FLOPs at the peak, and one launch per call on a GPU, whichever is most."""
    memory = bytes_moved(profile) / (bandwidth_gb_s * 1e3) if bandwidth_gb_s > 0 else 0.0
    dtype = profile.outputs[0].get("dtype", "") if profile.outputs else ""
    compute = flops(profile) / peak_flops(device_type, dtype) * 1e6
    launches = LAUNCH_FLOOR_US.get(device_type, 0.0) * max(1, profile.calls)
    return max(memory, compute, launches)


def gain_under_compile(compiled_us: float, headroom_us: float, total_us: float) -> float:
    """The compiled model's speedup if this candidate ran 2x faster, never past its floor (Amdahl)."""
    saved = min(compiled_us / 2.0, headroom_us)
    return 1.0 / (1.0 - saved / total_us) if total_us > 0 and saved < total_us else 1.0


def at_floor(compiled_us: float, headroom_us: float) -> bool:
    """Compile already runs it at its floor: what is left is under 10% of it or a few us. A
    candidate no kernel named (compiled_us 0) is not: its kernels may be past a name's cut."""
    return compiled_us > 0 and (headroom_us < AT_FLOOR_FRACTION * compiled_us or headroom_us < AT_FLOOR_US)


def floor_note(profile: Any) -> str:
    """Why a candidate is ranked last under compile, in words a table or a skip line can show."""
    if not profile.at_floor:
        return ""
    return (f"{AT_FLOOR_NOTE}: its kernels take {profile.compiled_us:.1f} us a forward, its floor "
            f"{profile.floor_us:.1f} us")


def annotate(profiles: list[Any], compiled: dict[str, float], result: CompiledProfile) -> None:
    """Set compiled_us, floor_us, headroom_us, gain_compiled and at_floor on every compute,
    chain and copy candidate (views, allocations and random ops are never searched)."""
    calls = {p.signature: p.calls for p in profiles if p.kind != "chain"}
    for p in profiles:
        if p.kind not in ("compute", "chain", "copy"):
            continue
        us = chain_us(p.chain or {}, compiled, calls) if p.kind == "chain" else compiled.get(p.signature, 0.0)
        floor = floor_us(p, result.device, result.bandwidth_gb_s)
        p.compiled_us, p.floor_us = us, floor
        p.headroom_us = max(0.0, us - floor)
        p.gain_compiled = gain_under_compile(us, p.headroom_us, result.total_us)
        p.at_floor = at_floor(us, p.headroom_us)


# ---------------------------------------------------------------- profiling the compiled model

def profile_compiled(loaded: Any, profiles: list[Any], warm_s: float = 1.0) -> CompiledProfile:
    """Compile the model (default mode), warm it, profile PROFILED_PASSES forwards, attribute each
    kernel to `profiles` and annotate them. Never raises: a failure is the result's `error`, and
    the profiles keep no compiled fields."""
    device_type = loaded.device.type
    result = CompiledProfile(device=device_type, launch_floor_us=LAUNCH_FLOOR_US.get(device_type, 0.0))
    try:
        kernels, result.total_us, result.passes, result.compile_s = _profiled_kernels(loaded, warm_s)
        result.bandwidth_gb_s, result.bandwidth_from = _bandwidth(loaded.device)
        compiled, unmapped = attribute(kernels, profiles)
        result.attributed_us = sum(k.us for k in kernels) - sum(unmapped.values())
        result.unmapped = _unmapped_rows(unmapped, result.total_us - sum(k.us for k in kernels), device_type)
        annotate(profiles, compiled, result)
    except Exception as e:  # noqa: BLE001 - a model compile cannot take is ranked by eager time
        for p in profiles:
            p.compiled_us = p.floor_us = p.headroom_us = p.gain_compiled = None
            p.at_floor = False
        first = (str(e).strip().splitlines() or [""])[0][:200]
        result.error = f"{type(e).__name__}: {first}" if first else type(e).__name__
    return result


def _profiled_kernels(loaded: Any, warm_s: float) -> tuple[list[KernelTime], float, int, float]:
    """(kernels per forward, total us per forward, passes profiled, compile seconds)."""
    from torch.profiler import ProfilerActivity, profile

    from kernforge.capture.forward import kernel_us, quiet_native_stderr, warm_up

    on_gpu = loaded.device.type == "cuda"
    passes = PROFILED_PASSES["cuda" if on_gpu else "cpu"]
    compiled = replace(loaded, module=torch.compile(loaded.module))
    try:
        with _inductor_naming():
            started = time.perf_counter()
            _forward(compiled)  # the compile itself
            compile_s = time.perf_counter() - started
            warm_up(compiled, least_s=warm_s)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
        with quiet_native_stderr(), profile(activities=activities) as prof:
            for _ in range(passes):
                _forward(compiled)
            if on_gpu:
                torch.cuda.synchronize(loaded.device)
        events = prof.events()
        kernels = gpu_kernels(events) if on_gpu else cpu_kernels(events)
        total = kernel_us(events) if on_gpu else host_us(events)
    finally:
        torch._dynamo.reset()  # the compiled graphs hold the model's weights and, on a GPU, memory
    return [replace(k, us=k.us / passes) for k in kernels], total / passes, passes, compile_s


def _forward(loaded: Any) -> Any:
    with torch.no_grad():
        return loaded.module(*loaded.inputs)


def _inductor_naming() -> Any:
    """Inductor's config for the compile: kernels named after their original ATen ops, and on a
    CPU each generated kernel in the profiler (cpp.enable_kernel_profile: without it a cpp kernel
    is no event, only time inside the compiled graph's). Keys this torch lacks are left out."""
    from torch._inductor import config

    wanted = {"triton.descriptive_names": "original_aten", "cpp.descriptive_names": "original_aten",
              "cpp.enable_kernel_profile": True}
    present = {k: v for k, v in wanted.items() if _has_config(config, k)}
    return config.patch(present)


def _has_config(config: Any, dotted: str) -> bool:
    obj = config
    for part in dotted.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def cpu_kernels(events: Any) -> list[KernelTime]:
    """A CPU profile's kernels: each generated kernel's event and each outermost ATen op (a
    library call: mm, convolution, or an allocation), with its host time, children included."""
    kernels = []
    for ev in events:
        if getattr(ev, "device_type", None) != torch.autograd.DeviceType.CPU or _inside_kernel(ev):
            continue
        if inductor_ops(ev.name) is not None or ev.name.startswith("aten::"):
            kernels.append(kernel_of(ev.name, float(ev.cpu_time_total), _aten_descendants(ev)))
    return kernels


def _inside_kernel(ev: Any) -> bool:
    parent = ev.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::") or inductor_ops(parent.name) is not None:
            return True
        parent = parent.cpu_parent
    return False


def _aten_descendants(ev: Any) -> list[str]:
    out, stack = [], list(ev.cpu_children)
    while stack:
        child = stack.pop(0)
        if child.name.startswith("aten::"):
            out.append(child.name)
        stack.extend(child.cpu_children)
    return out


def host_us(events: Any) -> float:
    """A CPU forward's host time: its top-level events (the compiled region, dynamo's guards)."""
    return float(sum(ev.cpu_time_total for ev in events
                     if getattr(ev, "cpu_parent", None) is None
                     and getattr(ev, "device_type", None) == torch.autograd.DeviceType.CPU))


def gpu_kernels(events: Any) -> list[KernelTime]:
    """A GPU profile's kernels: each generated kernel from its device event (its name is its ops,
    whether or not the profiler linked it to a host event), and each library kernel from the host
    event that launched it, with the ATen ops above that event, outermost first."""
    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    kernels = [kernel_of(ev.name, float(ev.time_range.elapsed_us()), []) for ev in events
               if getattr(ev, "device_type", None) == cuda and inductor_ops(ev.name) is not None]
    for ev in events:
        if getattr(ev, "device_type", None) != cpu or not getattr(ev, "kernels", None):
            continue
        launched_by = _aten_ancestry(ev)
        kernels += [kernel_of(k.name, float(k.duration), launched_by) for k in ev.kernels
                    if inductor_ops(k.name) is None]
    return kernels


def _aten_ancestry(ev: Any) -> list[str]:
    chain, node = [], ev
    while node is not None:
        if node.name.startswith("aten::"):
            chain.append(node.name)
        node = node.cpu_parent
    return chain[::-1]


def _bandwidth(device: torch.device) -> tuple[float, str]:
    """The copy bandwidth evaluate.hardware measures (as the worker's baseline does), else the default."""
    from kernforge.harness.hardware import measure_hardware

    measured = measure_hardware(device).get("bandwidth_gb_s")
    if measured:
        return float(measured), "measured"
    return DEFAULT_BANDWIDTH_GB_S.get(device.type, DEFAULT_BANDWIDTH_GB_S["cpu"]), "default"


# What the time outside every listed kernel is: on a GPU device time no host event launched
# (kernels the profiler did not link), on a CPU host time between kernels (guards, the wrapper).
OUTSIDE = {"cuda": "(kernels no host event launched)", "cpu": "(outside any kernel: guards, the compiled graph's wrapper)"}


def _unmapped_rows(unmapped: dict[str, float], outside_us: float, device_type: str) -> list[dict[str, Any]]:
    """The longest unmapped kernels per forward, with the time outside every kernel (OUTSIDE)."""
    rows = [{"kernel": name, "us": us} for name, us in unmapped.items()]
    if outside_us > 0.5:
        rows.append({"kernel": OUTSIDE.get(device_type, OUTSIDE["cpu"]), "us": outside_us})
    rows.sort(key=lambda r: -r["us"])
    return rows[:UNMAPPED_LISTED]


def to_json(result: CompiledProfile) -> dict[str, Any]:
    return asdict(result)


def from_json(data: dict[str, Any] | None) -> CompiledProfile | None:
    if not data:
        return None
    known = CompiledProfile.__dataclass_fields__
    return CompiledProfile(**{k: v for k, v in data.items() if k in known})
