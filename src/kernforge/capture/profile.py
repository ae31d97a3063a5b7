"""Capture a model: record its calls over a few forward passes, time them, rank the signatures."""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from kernforge.capture.chains import Chain, ChainSampler, find_chains, first_reads
from kernforge.capture.recorder import (
    RANGE_PREFIX,
    Call,
    ModuleTracker,
    Recorder,
    qualified_name,
)
from kernforge.capture.serialize import placeholders_of, save_sample
from kernforge.models import LoadedModel, run_forward

# A sample of real inputs per signature is kept on disk; these caps, on the bytes saved, keep a
# large model's capture from filling the disk. Inputs over them leave a partly real sample: the
# tensors that fit, and placeholders for the others, whose values the evaluator draws. capture_model
# reads them when called, so that a test can lower them for a whole `optimize`.
DEFAULT_SAMPLES_PER_SIGNATURE = 2
DEFAULT_SAMPLE_CAP_BYTES = 256 << 20  # one sample's input tensors
DEFAULT_TOTAL_CAP_BYTES = 2 << 30  # all samples of one capture
# "chain": a fused chain of cheap ops (capture/chains.py), ranked beside the single ops
KINDS = ("compute", "view", "copy", "alloc", "random", "chain")


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
    schema: str = ""
    module: str = ""  # the nn.Module of its first call
    # How many of its samples' input tensors are the model's: all, partial or none; the others,
    # over the sample caps, are saved as placeholders (Placeholder.to_json), listed here.
    real_inputs: str = "all"
    placeholders: list[dict[str, Any]] = field(default_factory=list)
    # kind "chain": its steps, outputs and instances (chains.Chain.to_json); op names the steps,
    # args and outputs are the chain's external inputs and kept values
    chain: dict[str, Any] | None = None

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
    captured_ms: float  # wall time of one recorded forward pass
    total_time_us: float  # time of all captured calls per forward pass (the shares' denominator)
    # What the model measurably spends without kernforge watching: on a GPU the kernel
    # time of a plain profiled pass; on a CPU the plain forward's wall time.
    measured_total_us: float
    repeats: int
    profiles: list[OpProfile]

    @property
    def coverage(self) -> float:
        """Captured op time over the measured total: near 1 when the ranking sees all the time."""
        return self.total_time_us / self.measured_total_us if self.measured_total_us else 0.0

    @property
    def overhead(self) -> float:
        """How much slower a recorded forward pass is than a plain one."""
        return self.captured_ms / self.forward_ms if self.forward_ms else 0.0

    def ranked(self, include_kinds: tuple[str, ...] = ("compute",)) -> list[OpProfile]:
        return [p for p in self.profiles if p.kind in include_kinds]


def capture_model(
    loaded: LoadedModel,
    out_dir: Path | None,
    repeats: int = 3,
    samples_per_signature: int = DEFAULT_SAMPLES_PER_SIGNATURE,
    sample_cap_bytes: int | None = None,
    total_cap_bytes: int | None = None,
) -> Capture:
    """Record `repeats` forward passes after a warm-up; save input samples and the call log under out_dir.

    Samples are kept for compute ops only (views, copies and allocations are not
    searched), at most samples_per_signature each, no more than sample_cap_bytes
    saved for one and total_cap_bytes in all (None: the module's defaults). A
    signature whose inputs are over them gets one sample that keeps the tensors
    that fit and placeholders for the others.
    """
    sample_cap_bytes = DEFAULT_SAMPLE_CAP_BYTES if sample_cap_bytes is None else sample_cap_bytes
    total_cap_bytes = DEFAULT_TOTAL_CAP_BYTES if total_cap_bytes is None else total_cap_bytes
    if out_dir is None:
        samples_per_signature = 0
    run_forward(loaded)  # warm-up: lazy init, allocator growth, library autotuning
    forward_ms = _median_forward_ms(loaded)
    on_gpu = loaded.device.type == "cuda"
    measured_us = _kernel_total_us(loaded) if on_gpu else forward_ms * 1e3
    recorders, times = [], []
    captured_ms = 0.0
    for r in range(repeats):
        recorder = Recorder(samples_per_signature if r == 0 else 0, sample_cap_bytes, total_cap_bytes,
                            profiler_ranges=on_gpu)
        start = time.perf_counter()
        times.append(_recorded_forward(loaded, recorder, on_gpu))
        captured_ms = (time.perf_counter() - start) * 1e3
        recorders.append(recorder)
    capture = _summarise(loaded, recorders, times, forward_ms, captured_ms, measured_us)
    chains = find_chains(recorders[0].calls, recorders[0].returned_ids)
    capture.profiles += [_chain_profile(ch, recorders[0].calls, times, capture.total_time_us) for ch in chains]
    capture.profiles.sort(key=lambda p: p.time_us, reverse=True)
    if out_dir is not None:
        _save(capture, recorders[0], times[0], out_dir)
        # what the op samples left of the total cap (recorders[0].bytes_left) goes to the chains
        _save_chain_samples(loaded, capture, chains, recorders[0].calls, out_dir, samples_per_signature,
                            sample_cap_bytes, max(0, recorders[0].bytes_left))
        (out_dir / "profile.json").write_text(json.dumps(asdict(capture), indent=1))
    return capture


def _chain_profile(chain: Chain, calls: list[Call], times: list[dict[int, float]], total: float) -> OpProfile:
    """A chain as a ranked row: its time per pass is its instances' calls summed (median over the
    passes), the time its steps take today."""
    members = [m for instance in chain.instances for m in instance.members]
    # Each call's median over the passes, summed; at most all the captured time (a chain that is
    # the whole model, measured in noisy passes, could otherwise come out above its total).
    us = min(total, sum(_median([t.get(m, 0.0) for t in times]) for m in members))
    share = us / total if total > 0 else 0.0
    first = calls[chain.instances[0].members[0]]
    return OpProfile(signature=chain.signature, op=chain.op, kind="chain", args=chain.input_metas,
                     outputs=chain.output_metas, calls=len(chain.instances), time_us=us, share=share,
                     gain_if_2x=1.0 / (1.0 - share / 2.0), schema=chain.schema,
                     module=first.module, chain=chain.to_json())


def _save_chain_samples(loaded: LoadedModel, capture: Capture, chains: list[Chain], calls: list[Call],
                        out_dir: Path, per_chain: int, sample_cap_bytes: int, bytes_left: int) -> None:
    """One more pass that copies the inputs of the first instances of each chain (ChainSampler)."""
    if not chains or per_chain <= 0:
        return
    by_index = {c.index: c for c in calls}
    wanted = [(ch.signature, inst, first_reads(inst, by_index)) for ch in chains for inst in ch.instances[:per_chain]]
    sampler = ChainSampler(wanted, {c.index: qualified_name(c.func) for c in calls}, sample_cap_bytes, bytes_left)
    with sampler, torch.no_grad():
        loaded.module(*loaded.inputs)
    by_sig = {p.signature: p for p in capture.profiles}
    counts: dict[str, int] = {}
    for sample in sampler.finished():
        profile = by_sig[sample["signature"]]
        k = counts.get(profile.signature, 0)
        counts[profile.signature] = k + 1
        rel = f"samples/{profile.signature}/{k}.pt"
        save_sample(sample["inputs"], {}, sample["outputs"], out_dir / rel)
        profile.samples.append(rel)
        profile.real_inputs = sample["real"]
        profile.placeholders += [p.to_json() for p in placeholders_of(sample["inputs"])]


def load_capture(out_dir: Path) -> Capture:
    data = json.loads((out_dir / "profile.json").read_text())
    data["profiles"] = [OpProfile(**p) for p in data["profiles"]]
    return Capture(**data)


def _recorded_forward(loaded: LoadedModel, recorder: Recorder, on_gpu: bool) -> dict[int, float]:
    """One recorded pass; the time of each call by index (us)."""
    if not on_gpu:
        with ModuleTracker(loaded.module, recorder), recorder, torch.no_grad():
            recorder.mark_returned(loaded.module(*loaded.inputs))
        return {c.index: c.cpu_us for c in recorder.calls}
    with _quiet_native_stderr(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with ModuleTracker(loaded.module, recorder), recorder, torch.no_grad():
            recorder.mark_returned(loaded.module(*loaded.inputs))
        torch.cuda.synchronize(loaded.device)
    return _range_device_us(prof.events())


def _range_device_us(events: Any) -> dict[int, float]:
    """Device time of each `kf::<index>` range: the summed durations of the kernels launched inside it.

    Only the CPU-side row of a range: the profiler also puts a copy of the range on
    the GPU's timeline, spanning first kernel start to last kernel end, idle gaps
    included (ResNet-50 bs 32 fp32 on an H200: 6.6 ms of spans for 4.9 ms of kernels).
    """
    times: dict[int, float] = {}
    for ev in events:
        if ev.name.startswith(RANGE_PREFIX) and ev.device_type == torch.autograd.DeviceType.CPU:
            times[int(ev.name[len(RANGE_PREFIX):])] = float(ev.device_time_total)
    return times


def _kernel_total_us(loaded: LoadedModel) -> float:
    """All device time of one plain forward pass, as the profiler sees it with nothing recorded."""
    with _quiet_native_stderr(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with torch.no_grad():
            loaded.module(*loaded.inputs)
        torch.cuda.synchronize(loaded.device)
    return kernel_us(prof.events())


def kernel_us(events: Any) -> float:
    """The summed duration of the device-side events (kernels, memcpy, memset).

    Only the device rows: each CPU op's own row also carries the time of the
    kernels it launched, so summing every row counts each kernel twice.
    """
    return float(sum(e.time_range.elapsed_us() for e in events
                     if e.device_type == torch.autograd.DeviceType.CUDA))


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


def _summarise(loaded: LoadedModel, recorders: list[Recorder], times: list[dict[int, float]],
               forward_ms: float, captured_ms: float, measured_us: float) -> Capture:
    # Per signature: the time of all its calls in one forward pass (0 in a pass that
    # did not run it), then the median over the passes, so that one disturbed pass on
    # a busy machine does not skew the ranking.
    per_pass: list[dict[str, float]] = []
    first: dict[str, Call] = {}
    counts: dict[str, int] = {}  # calls in one pass; the most any pass made
    for recorder, t in zip(recorders, times):
        this_pass: dict[str, float] = {}
        this_count: dict[str, int] = {}
        for call in recorder.calls:
            this_pass[call.signature] = this_pass.get(call.signature, 0.0) + t.get(call.index, 0.0)
            this_count[call.signature] = this_count.get(call.signature, 0) + 1
            first.setdefault(call.signature, call)
        for sig, n in this_count.items():
            counts[sig] = max(counts.get(sig, 0), n)
        per_pass.append(this_pass)
    time_per_sig = {sig: _median([p.get(sig, 0.0) for p in per_pass]) for sig in first}
    total = sum(time_per_sig.values())
    profiles = [_profile(call, counts[sig], time_per_sig[sig], total) for sig, call in first.items()]
    profiles.sort(key=lambda p: p.time_us, reverse=True)
    return Capture(model=loaded.name, device=str(loaded.device), forward_ms=forward_ms,
                   captured_ms=captured_ms, total_time_us=total, measured_total_us=measured_us,
                   repeats=len(recorders), profiles=profiles)


def _profile(call: Call, calls: int, us: float, total: float) -> OpProfile:
    share = us / total if total > 0 else 0.0
    args = list(call.args)
    if call.kwargs:
        args.append({"kwargs": call.kwargs})
    return OpProfile(signature=call.signature, op=qualified_name(call.func), kind=call.kind, args=args,
                     outputs=call.outputs, calls=calls, time_us=us, share=share,
                     gain_if_2x=1.0 / (1.0 - share / 2.0), schema=str(call.func._schema),
                     module=call.module)


def _save(capture: Capture, recorder: Recorder, times: dict[int, float], out_dir: Path) -> None:
    """calls.jsonl (every call of the first pass, with its producers) and the ops' samples; the
    caller writes profile.json once the chains' samples are in it too."""
    out_dir.mkdir(parents=True, exist_ok=True)
    by_sig = {p.signature: p for p in capture.profiles}
    for sig, kept in recorder.samples.items():
        for k, sample in enumerate(kept):
            rel = f"samples/{sig}/{k}.pt"
            save_sample(sample["args"], sample["kwargs"], sample["outputs"], out_dir / rel)
            by_sig[sig].samples.append(rel)
            by_sig[sig].real_inputs = sample["real"]
            by_sig[sig].placeholders += [p.to_json() for p in placeholders_of((sample["args"], sample["kwargs"]))]
    lines = [json.dumps({"index": c.index, "op": qualified_name(c.func), "signature": c.signature,
                         "kind": c.kind, "module": c.module, "producers": c.producers,
                         "time_us": times.get(c.index, 0.0)}) for c in recorder.calls]
    (out_dir / "calls.jsonl").write_text("\n".join(lines) + "\n")
