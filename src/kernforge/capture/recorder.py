"""Record the ATen calls of one forward pass and time each with the profiler.

A TorchDispatchMode sees every ATen call after autograd and after composite ops
are decomposed, so `torch.softmax`, `x.softmax()` and `F.softmax` all arrive as
`aten::_softmax.default`, and a hand-written norm arrives as its pieces. Each
call runs inside a profiler range named `kf::<index>`, which ties the device
time the profiler measures to exactly that call: no matching by name or shape.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from kernforge.models import LoadedModel, run_forward

RANGE_PREFIX = "kf::"
# A sample of real inputs per signature is kept on disk; these caps keep a large
# model's capture from filling the disk (a ResNet-50 at batch 32 has ~300 MB of
# activations per forward).
DEFAULT_SAMPLES_PER_SIGNATURE = 2
DEFAULT_SAMPLE_CAP_BYTES = 256 << 20  # one sample's tensors
DEFAULT_TOTAL_CAP_BYTES = 2 << 30  # all samples of one capture

_ALLOC_OPS = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like",
    "full", "full_like", "new_empty", "new_empty_strided", "new_zeros", "new_ones",
    "new_full", "scalar_tensor", "arange", "lift_fresh",
}
_COPY_OPS = {"copy_", "_to_copy", "clone", "contiguous", "_copy_from", "copy", "lift_fresh_copy"}


@dataclass
class OpProfile:
    """One signature: an ATen overload with fixed argument shapes, dtypes, strides and values."""

    signature: str
    op: str
    kind: str  # compute | view | copy | alloc | random
    args: list[Any]  # JSON description: tensors as {"shape","dtype","stride","device"}
    outputs: list[dict[str, Any]]
    calls: int
    time_us: float  # device time per forward pass, all calls of this signature together
    share: float  # of the time of all captured calls
    gain_if_2x: float  # end-to-end speedup if this signature ran 2x faster (Amdahl)
    samples: list[str] = field(default_factory=list)  # files under the capture folder

    @property
    def shape_text(self) -> str:
        tensors = [a for a in self.args if isinstance(a, dict) and "shape" in a]
        return " ".join("x".join(map(str, t["shape"])) or "scalar" for t in tensors[:2])

    @property
    def dtype_text(self) -> str:
        tensors = [a for a in self.args if isinstance(a, dict) and "dtype" in a]
        return tensors[0]["dtype"].replace("torch.", "") if tensors else "-"


@dataclass
class Capture:
    model: str
    device: str
    forward_ms: float  # median wall time of a plain forward pass, no recording
    captured_ms: float  # wall time of one recorded forward pass: the capture's overhead
    total_time_us: float  # device time of all captured calls per forward pass
    repeats: int
    profiles: list[OpProfile]

    def ranked(self, include_kinds: tuple[str, ...] = ("compute",)) -> list[OpProfile]:
        return [p for p in self.profiles if p.kind in include_kinds]


def capture_model(
    loaded: LoadedModel,
    out_dir: Path | None,
    repeats: int = 3,
    samples_per_signature: int = DEFAULT_SAMPLES_PER_SIGNATURE,
    sample_cap_bytes: int = DEFAULT_SAMPLE_CAP_BYTES,
    total_cap_bytes: int = DEFAULT_TOTAL_CAP_BYTES,
) -> Capture:
    """Profile `repeats` forward passes after a warm-up; save input samples under out_dir.

    Samples are kept for compute ops only (views, copies and allocations are not
    searched), at most samples_per_signature each, none over sample_cap_bytes,
    and no more than total_cap_bytes in all.
    """
    if out_dir is None:
        samples_per_signature = 0
    run_forward(loaded)  # warm-up: lazy init, allocator growth, library autotuning
    forward_ms = _median_forward_ms(loaded)
    recorders, events_per_repeat = [], []
    captured_ms = 0.0
    for r in range(repeats):
        recorder = _Recorder(samples_per_signature if r == 0 else 0, sample_cap_bytes, total_cap_bytes)
        start = time.perf_counter()
        times = _profiled_forward(loaded, recorder)
        captured_ms = (time.perf_counter() - start) * 1e3
        recorders.append(recorder)
        events_per_repeat.append(times)
    capture = _summarise(loaded, recorders, events_per_repeat, forward_ms, captured_ms)
    if out_dir is not None:
        _save(capture, recorders[0], out_dir)
    return capture


def load_capture(out_dir: Path) -> Capture:
    data = json.loads((out_dir / "profile.json").read_text())
    data["profiles"] = [OpProfile(**p) for p in data["profiles"]]
    return Capture(**data)


def load_sample(path: Path) -> tuple[list[Any], dict[str, Any]]:
    """Load a saved (args, kwargs) exactly: dtype, strides and values as captured."""
    blob = torch.load(path, weights_only=False, map_location="cpu")
    return decode_tree(blob["args"]), decode_tree(blob["kwargs"])


class _Recorder(TorchDispatchMode):
    def __init__(self, samples_per_signature: int, sample_cap_bytes: int, total_cap_bytes: int):
        super().__init__()
        self.calls: list[dict[str, Any]] = []
        self.samples: dict[str, list[tuple[Any, Any]]] = {}
        self.samples_per_signature = samples_per_signature
        self.sample_cap_bytes = sample_cap_bytes
        self.bytes_left = total_cap_bytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        index = len(self.calls)
        sig = signature_of(func, args, kwargs)
        if _kind(func) == "compute":
            self._maybe_keep_sample(sig, args, kwargs)  # before the call: in-place ops change inputs
        with record_function(f"{RANGE_PREFIX}{index}"):
            out = func(*args, **kwargs)
        self.calls.append({"func": func, "signature": sig, "args": args, "kwargs": kwargs,
                           "outputs": [_tensor_meta(t) for t in tree_flatten(out)[0]
                                       if isinstance(t, torch.Tensor)]})
        return out

    def _maybe_keep_sample(self, sig: str, args: Any, kwargs: Any) -> None:
        kept = self.samples.setdefault(sig, [])
        if len(kept) >= self.samples_per_signature:
            return
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        size = sum(t.numel() * t.element_size() for t in tensors)
        if size > min(self.sample_cap_bytes, self.bytes_left):
            return
        self.bytes_left -= size
        kept.append(tree_map(_detached_copy, (args, kwargs)))


def signature_of(func: Any, args: Any, kwargs: Any) -> str:
    """A stable id for an op with its argument shapes, dtypes, strides and values."""
    desc = json.dumps([str(func), describe_args(args), describe_args(kwargs)], sort_keys=True)
    short = str(func).replace("aten.", "").replace(".default", "")
    return f"{short}-{hashlib.sha1(desc.encode()).hexdigest()[:8]}"


def describe_args(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return _tensor_meta(value)
    if isinstance(value, (list, tuple)):
        return [describe_args(v) for v in value]
    if isinstance(value, dict):
        return {k: describe_args(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _tensor_meta(t: torch.Tensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": str(t.dtype), "stride": list(t.stride()),
            "device": t.device.type}


def _detached_copy(x: Any) -> Any:
    """A copy with the same strides: clone() would make a non-dense view contiguous."""
    if isinstance(x, torch.Tensor):
        out = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
        out.copy_(x.detach())
        return out
    return x


def _profiled_forward(loaded: LoadedModel, recorder: _Recorder) -> dict[int, float]:
    activities = [ProfilerActivity.CPU]
    on_gpu = loaded.device.type == "cuda"
    if on_gpu:
        activities.append(ProfilerActivity.CUDA)
    with _quiet_native_stderr(), profile(activities=activities) as prof:
        with recorder, torch.no_grad():
            loaded.module(*loaded.inputs)
        if on_gpu:
            torch.cuda.synchronize(loaded.device)
    return _range_times_us(prof.events(), on_gpu)


def _range_times_us(events: Any, on_gpu: bool) -> dict[int, float]:
    """Device time of each `kf::<index>` range: kernel time on a GPU, CPU time on a CPU."""
    times: dict[int, float] = {}
    for ev in events:
        if not ev.name.startswith(RANGE_PREFIX):
            continue
        index = int(ev.name[len(RANGE_PREFIX):])
        if on_gpu:
            us = float(getattr(ev, "device_time_total", 0.0) or 0.0)
            if us == 0.0 and getattr(ev, "device_type", None) != torch.autograd.DeviceType.CPU:
                us = float(ev.time_range.elapsed_us())  # the GPU-side copy of the range
        else:
            us = float(ev.cpu_time_total)
        times[index] = max(times.get(index, 0.0), us)
    return times


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@contextlib.contextmanager
def _quiet_native_stderr():
    """Kineto prints start/stop lines straight to fd 2 on some builds; keep them off the terminal."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _median_forward_ms(loaded: LoadedModel, runs: int = 5) -> float:
    samples = []
    for _ in range(runs):
        if loaded.device.type == "cuda":
            torch.cuda.synchronize(loaded.device)
        start = time.perf_counter()
        with torch.no_grad():
            loaded.module(*loaded.inputs)
        if loaded.device.type == "cuda":
            torch.cuda.synchronize(loaded.device)
        samples.append((time.perf_counter() - start) * 1e3)
    return _median(samples)


def _kind(func: Any) -> str:
    base = func._schema.name.split("::")[-1]
    if torch.Tag.nondeterministic_seeded in func.tags:
        return "random"
    if base in _ALLOC_OPS:
        return "alloc"
    if base in _COPY_OPS:
        return "copy"
    if func.is_view or base in ("alias", "detach", "_unsafe_view"):
        return "view"
    return "compute"


def _summarise(loaded: LoadedModel, recorders: list[_Recorder], times: list[dict[int, float]],
               forward_ms: float, captured_ms: float) -> Capture:
    # Per signature: the time of all its calls in one forward pass, then the median
    # over the repeats, so that one disturbed pass on a busy machine does not skew the ranking.
    per_repeat: dict[str, list[float]] = {}
    for recorder, t in zip(recorders, times):
        this_pass: dict[str, float] = {}
        for i, call in enumerate(recorder.calls):
            this_pass[call["signature"]] = this_pass.get(call["signature"], 0.0) + t.get(i, 0.0)
        for sig, us in this_pass.items():
            per_repeat.setdefault(sig, []).append(us)
    time_per_sig = {sig: _median(v) for sig, v in per_repeat.items()}
    total = sum(time_per_sig.values())
    first: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    for call in recorders[0].calls:
        first.setdefault(call["signature"], call)
        counts[call["signature"]] = counts.get(call["signature"], 0) + 1
    profiles = []
    for sig, call in first.items():
        us = time_per_sig[sig]
        share = us / total if total > 0 else 0.0
        profiles.append(OpProfile(
            signature=sig, op=qualified_name(call["func"]), kind=_kind(call["func"]),
            args=describe_args(list(call["args"])) + (
                [{"kwargs": describe_args(call["kwargs"])}] if call["kwargs"] else []),
            outputs=call["outputs"], calls=counts[sig], time_us=us, share=share,
            gain_if_2x=1.0 / (1.0 - share / 2.0),
        ))
    profiles.sort(key=lambda p: p.time_us, reverse=True)
    return Capture(model=loaded.name, device=str(loaded.device), forward_ms=forward_ms,
                   captured_ms=captured_ms, total_time_us=total, repeats=len(recorders),
                   profiles=profiles)


# torch.dtype, torch.layout and torch.memory_format do not survive torch.save;
# they are stored by name and turned back into the torch objects on load.
_TORCH_ATTR_TYPES = (torch.dtype, torch.layout, torch.memory_format)


def encode_value(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, _TORCH_ATTR_TYPES):
        return {"__torch_attr__": str(x).replace("torch.", "")}
    if isinstance(x, torch.device):
        return {"__torch_device__": str(x)}
    return x


def _is_encoded(x: Any) -> bool:
    return isinstance(x, dict) and ("__torch_attr__" in x or "__torch_device__" in x)


def decode_tree(value: Any) -> Any:
    """decode_value over a nested structure; the encoded dicts are leaves, not containers."""
    return tree_map(decode_value, value, is_leaf=_is_encoded)


def decode_value(x: Any) -> Any:
    if isinstance(x, dict) and "__torch_attr__" in x:
        return getattr(torch, x["__torch_attr__"])
    if isinstance(x, dict) and "__torch_device__" in x:
        return torch.device(x["__torch_device__"])
    return x


def qualified_name(func: Any) -> str:
    """'aten::_softmax.default': the overload's schema name and overload name."""
    return f"{func._schema.name}.{func._overloadname}"


def _save(capture: Capture, recorder: _Recorder, out_dir: Path) -> None:
    samples_dir = out_dir / "samples"
    samples_dir.mkdir(parents=True, exist_ok=True)
    by_sig = {p.signature: p for p in capture.profiles}
    for sig, kept in recorder.samples.items():
        for k, (args, kwargs) in enumerate(kept):
            rel = f"samples/{sig}/{k}.pt"
            (out_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            args, kwargs = tree_map(encode_value, (list(args), kwargs))
            torch.save({"args": args, "kwargs": kwargs}, out_dir / rel)
            by_sig[sig].samples.append(rel)
    (out_dir / "profile.json").write_text(json.dumps(asdict(capture), indent=1))
