"""Capture a model: record its calls over a few forward passes, time them, rank the signatures.

The time of a call seen while recording is not the op's: on a CPU it is the wall time around
the call inside the recorder, of the order of a small op itself, and on a loaded 2-core machine
each op's worker threads wait for a core (a (2, 40, 40) softmax recorded at 7.8 ms, 3 us alone).
So each hot signature is replayed on its saved real inputs, timed as the evaluator times eager
(harness.session.time_op), and ranked by its calls x that time; a signature that cannot be
replayed (no sample, a non-tensor output, the budget spent) keeps its recorded time, and says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from kernforge.capture.forward import (kernel_total_us, median, median_forward_ms,
                                      quiet_native_stderr, warm_up)
from kernforge.capture.chains import Chain, ChainSampler, find_chains, first_reads
from kernforge.capture.recorder import (
    RANGE_PREFIX,
    Call,
    ModuleTracker,
    Recorder,
    qualified_name,
)
from kernforge.harness.serialize import placeholders_of, save_sample
from kernforge.models import LoadedModel
from kernforge.phases import Stopwatch
from kernforge.records.task import RealInputs

# A sample of real inputs per signature is kept on disk; these caps, on the bytes saved, keep a
# large model's capture from filling the disk. Inputs over them leave a partly real sample: the
# tensors that fit, and placeholders for the others, whose values the evaluator draws. capture_model
# reads them when called, so that a test can lower them for a whole `optimize`.
DEFAULT_SAMPLES_PER_SIGNATURE = 2
DEFAULT_SAMPLE_CAP_BYTES = 256 << 20  # one sample's input tensors
DEFAULT_TOTAL_CAP_BYTES = 2 << 30  # all samples of one capture
# Replay: about REPLAY_TARGET_MS of timed calls per signature at its recorded speed, within
# REPLAY_CALLS (5 keep a median; more than 50 add nothing to a ranking), and REPLAY_BUDGET_S for
# the whole capture, hottest signatures first: a CPU-size ResNet-50 replays in seconds.
REPLAY_TARGET_MS, REPLAY_CALLS, REPLAY_BUDGET_S = 100.0, (5, 50), 30.0
# The hottest REPLAY_AGAIN signatures after one round are replayed once more, later, and keep the
# faster of the two medians, as the worker keeps the faster of eager before and after: on this
# shared 2-core machine, while another process held the second core, every 2-thread call waited
# for it (a Gemma (32, 64) x (64, 128) mm replayed at 15.9 ms a call, spread 0.3%; 15 us in the
# worker moments later), which put it on top of the ranking.
REPLAY_AGAIN = 10
# ...where its first replay is in doubt: noisy ((p80 - p20) / p50 over REPLAY_STABLE_SPREAD), or
# slower than REPLAY_SLOWER times its recorded time a call (the mm above: stable and 1000x off).
# Otherwise a second replay changed nothing and cost as much again, within a budget it overran
# (the VAE's replay phase took 61 s of a 30 s budget on an H100: bench/results/h100/issue32/vae-phases).
REPLAY_STABLE_SPREAD, REPLAY_SLOWER = 0.05, 1.5
# Coverage outside this band: the per-op times do not add up to the model's time.
COVERAGE_BAND = (0.5, 1.5)
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
    real_inputs: RealInputs = "all"
    placeholders: list[dict[str, Any]] = field(default_factory=list)
    # kind "chain": its steps, outputs and instances (chains.Chain.to_json); op names the steps,
    # args and outputs are the chain's external inputs and kept values
    chain: dict[str, Any] | None = None
    # Where time_us comes from: "replayed" (calls x replay_us_per_call) or "recorded" (the time
    # seen while recording, the recorder's overhead in it: not replayed, or its replay failed)
    time_from: str = "recorded"
    recorded_us: float = 0.0  # the time per pass seen while recording
    replay_us_per_call: float | None = None  # p50 of the replay, timed as the evaluator times eager
    replay_spread: float | None = None  # (p80 - p20) / p50 of the replay: its noise
    # Under torch.compile (capture/compiled.py), where the capture profiled the compiled model;
    # None where it did not (eager ranking, or profile.json files from before).
    compiled_us: float | None = None  # device time per forward of the compiled kernels it came from
    floor_us: float | None = None  # its bytes at the copy bandwidth, its FLOPs at the peak, a launch a call
    headroom_us: float | None = None  # compiled_us - floor_us: what a search could win under compile
    gain_compiled: float | None = None  # the compiled model's speedup if it ran 2x faster, not past its floor
    at_floor: bool = False  # compile runs it at its floor: ranked by its eager gain alone

    @property
    def rank_gain(self) -> float:
        """What a search on it can give, eager or compiled, whichever is more (Amdahl)."""
        return max(self.gain_if_2x, self.gain_compiled or 1.0)

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
    replayed: int = 0  # signatures whose time is their replay's
    # seconds in each step (capture, replay, compiled_profile, samples: kernforge.phases), for the
    # run's phase breakdown; profile.json files from before it have none
    phases: dict[str, float] = field(default_factory=dict)
    # capture/compiled.py's CompiledProfile as JSON, where the compiled model was profiled (its
    # "error" says why it could not be); None: ranked by eager time only, as was asked
    compiled: dict[str, Any] | None = None
    # what an exported package's install() compares the model it is given with (runtime/loader):
    # the root module's class and its parameter count; "" and 0 in profile.json files from before
    model_class: str = ""
    model_parameters: int = 0

    @property
    def ranked_by_compile(self) -> bool:
        return bool(self.compiled) and not self.compiled.get("error")

    @property
    def coverage(self) -> float:
        """Per-op time over the measured total: near 1 when the ranking sees all the time."""
        return self.total_time_us / self.measured_total_us if self.measured_total_us else 0.0

    @property
    def coverage_text(self) -> str:
        """What the coverage compares, in one line, with a warning where it is far from 100%."""
        whole = ("kernel time of a plain profiled pass" if self.device.startswith("cuda")
                 else "wall time of a plain forward")
        signatures = sum(1 for p in self.profiles if p.kind != "chain")
        text = (f"captured op time is {self.coverage:.1%} of the {whole} ({self.measured_total_us / 1e3:.3f} ms): "
                f"the per-op times summed, {self.total_time_us / 1e3:.3f} ms, {self.replayed} of {signatures} "
                "signatures replayed on their saved inputs as the evaluator times eager, the others as recorded")
        warning = self.coverage_warning
        return f"{text}\n{warning}" if warning else text

    @property
    def coverage_warning(self) -> str:
        low, high = COVERAGE_BAND
        if not self.measured_total_us or low <= self.coverage <= high:
            return ""
        return (f"warning: coverage {self.coverage:.0%} is outside {low:.0%}-{high:.0%}: the per-op times do "
                "not add up to the model's time, so shares and projected gains are off (a busy machine, "
                "or ops faster in the model's warm caches than replayed cold); profile again on a quiet one")

    @property
    def overhead(self) -> float:
        """How much slower a recorded forward pass is than a plain one."""
        return self.captured_ms / self.forward_ms if self.forward_ms else 0.0

    def ranked(self, include_kinds: tuple[str, ...] = ("compute",)) -> list[OpProfile]:
        """The candidates of these kinds, most worth a search first: by eager time; where the
        compiled model was profiled, by the larger of the eager and the compiled gain. One that
        compile runs at its floor is ranked by its eager gain alone (its compiled gain is none),
        not put last: on an H100 the Gemma-style decoder's RMSNorm chains, at their floor under
        compile and 31% of eager's op time, were left unsearched behind a 1.5% rotary chain
        (bench/results/h100/issue32/models-20261207), and they are its eager speedup (1.43x,
        bench/results/h100/issue32/README.md)."""
        kept = [p for p in self.profiles if p.kind in include_kinds]
        if not self.ranked_by_compile:
            return kept
        return sorted(kept, key=lambda p: -p.rank_gain)


def capture_model(
    loaded: LoadedModel,
    out_dir: Path | None,
    repeats: int = 3,
    samples_per_signature: int = DEFAULT_SAMPLES_PER_SIGNATURE,
    sample_cap_bytes: int | None = None,
    total_cap_bytes: int | None = None,
    under_compile: bool = False,
    on_phase: Callable[[str], None] = lambda phase: None,
) -> Capture:
    """Record `repeats` forward passes after a warm-up; save input samples and the call log under out_dir.
    `on_phase` is told each phase (kernforge.phases) as it begins: capture, replay, ...

    profile.json is written last, whole or not at all: a folder that has it holds a finished
    capture (what a resumed run checks before it captures again).

    under_compile: also profile the model under torch.compile and set each candidate's compiled
    time, floor and headroom (capture/compiled.py), which the ranking then uses; a model that
    cannot be compiled or profiled is ranked by eager time, and `compiled["error"]` says why.

    Samples are kept for compute ops only (views, copies and allocations are not
    searched), at most samples_per_signature each, no more than sample_cap_bytes
    saved for one and total_cap_bytes in all (None: the module's defaults). A
    signature whose inputs are over them gets one sample that keeps the tensors
    that fit and placeholders for the others.
    """
    sample_cap_bytes = DEFAULT_SAMPLE_CAP_BYTES if sample_cap_bytes is None else sample_cap_bytes
    total_cap_bytes = DEFAULT_TOTAL_CAP_BYTES if total_cap_bytes is None else total_cap_bytes
    # Without out_dir one sample per signature is still kept, in memory, for the replay.
    kept_per_signature = max(1, samples_per_signature) if out_dir is None else samples_per_signature
    if out_dir is None:
        samples_per_signature = 0
    clock = Stopwatch()
    on_phase("capture")
    warm_up(loaded)
    forward_ms = median_forward_ms(loaded)
    on_gpu = loaded.device.type == "cuda"
    measured_us = kernel_total_us(loaded) if on_gpu else forward_ms * 1e3
    recorders, times = [], []
    captured_ms = 0.0
    for r in range(repeats):
        recorder = Recorder(kept_per_signature if r == 0 else 0, sample_cap_bytes, total_cap_bytes,
                            profiler_ranges=on_gpu)
        start = time.perf_counter()
        times.append(_recorded_forward(loaded, recorder, on_gpu))
        captured_ms = (time.perf_counter() - start) * 1e3
        recorders.append(recorder)
    recorded = _summarise(loaded, recorders, times, forward_ms, captured_ms, measured_us)
    record_s = clock.lap()
    on_phase("replay")
    replays = replay_signatures(recorders[0], recorded.profiles, loaded.device)
    times = [_with_replayed(rec.calls, t, replays) for rec, t in zip(recorders, times)]
    capture = _summarise(loaded, recorders, times, forward_ms, captured_ms, measured_us)
    capture.phases = {"capture": record_s, "replay": clock.lap()}
    capture.replayed = _mark_replayed(capture.profiles, recorded.profiles, replays)
    chains = find_chains(recorders[0].calls, recorders[0].returned_ids, recorders[0].module_calls)
    capture.profiles += [_chain_profile(ch, recorders[0].calls, times, capture.total_time_us, replays)
                         for ch in chains]
    capture.profiles.sort(key=lambda p: p.time_us, reverse=True)
    if under_compile:
        from kernforge.capture.compiled import profile_compiled, to_json

        on_phase("compiled_profile")
        capture.compiled = to_json(profile_compiled(loaded, capture.profiles))
    capture.phases["compiled_profile"] = clock.lap()
    if out_dir is not None:
        on_phase("samples")
        _save(capture, recorders[0], times[0], out_dir)
        # what the op samples left of the total cap (recorders[0].bytes_left) goes to the chains
        _save_chain_samples(loaded, capture, chains, recorders[0].calls, out_dir, samples_per_signature,
                            sample_cap_bytes, max(0, recorders[0].bytes_left))
        capture.phases["samples"] = clock.lap()
        written = out_dir / "profile.json.tmp"
        written.write_text(json.dumps(asdict(capture), indent=1))
        written.replace(out_dir / "profile.json")
    return capture


def _chain_profile(chain: Chain, calls: list[Call], times: list[dict[int, float]], total: float,
                   replays: dict[str, Any]) -> OpProfile:
    """A chain as a ranked row: its time per pass is its instances' calls summed (median over the
    passes), the time its steps take today; "replayed" when every step's signature was."""
    members = [m for instance in chain.instances for m in instance.members]
    # Each call's median over the passes, summed; at most all the captured time (a chain that is
    # the whole model, measured in noisy passes, could otherwise come out above its total).
    us = min(total, sum(median([t.get(m, 0.0) for t in times]) for m in members))
    share = us / total if total > 0 else 0.0
    first = calls[chain.instances[0].members[0]]
    return OpProfile(signature=chain.signature, op=chain.op, kind="chain", args=chain.input_metas,
                     outputs=chain.output_metas, calls=len(chain.instances), time_us=us, share=share,
                     gain_if_2x=1.0 / (1.0 - share / 2.0), schema=chain.schema,
                     module=first.module, chain=chain.to_json(),
                     time_from="replayed" if all(calls[m].signature in replays for m in members) else "recorded")


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


def replay_signatures(recorder: Recorder, profiles: list[OpProfile], device: torch.device,
                      budget_s: float = REPLAY_BUDGET_S) -> dict[str, Any]:
    """signature -> the evaluator's eager Timing of its op on its kept samples (compute ops) or on
    values drawn in its inputs' layouts (views, copies, allocations), hottest (by recorded time)
    first, until budget_s is spent; random ops are not replayed. A
    signature whose replay fails (an output that is not a tensor, a sample that cannot be drawn)
    is left out: it keeps its recorded time."""
    from kernforge.harness.session import make_harness

    harness = make_harness(device)
    funcs = {}
    for call in recorder.calls:
        funcs.setdefault(call.signature, call.func)
    deadline = time.perf_counter() + budget_s
    replays: dict[str, Any] = {}
    by_sig = {p.signature: p for p in profiles}
    for p in sorted(profiles, key=lambda p: p.time_us, reverse=True):
        if time.perf_counter() > deadline:
            break
        timing = _replay_profile(harness, recorder, funcs, p, device)
        if timing is not None:
            replays[p.signature] = timing
    hottest = sorted(replays, key=lambda sig: by_sig[sig].calls * replays[sig].p50_ms, reverse=True)
    for sig in [s for s in hottest[:REPLAY_AGAIN] if _replay_doubtful(by_sig[s], replays[s])]:
        if time.perf_counter() > deadline:
            break
        again = _replay_profile(harness, recorder, funcs, by_sig[sig], device)
        if again is not None and again.p50_ms < replays[sig].p50_ms:
            replays[sig] = again
    return replays


def _replay_doubtful(p: OpProfile, replay: Any) -> bool:
    recorded_ms = p.time_us / max(1, p.calls) / 1e3
    return replay.spread > REPLAY_STABLE_SPREAD or replay.p50_ms > REPLAY_SLOWER * recorded_ms


def _replay_profile(harness: Any, recorder: Recorder, funcs: dict[str, Any], p: OpProfile,
                    device: torch.device) -> Any:
    layout = recorder.layouts.get(p.signature)
    samples = recorder.samples.get(p.signature) if p.kind == "compute" else [layout] if layout else None
    if not samples:
        return None
    return _replay(harness, funcs[p.signature], samples, p.outputs, device, _replay_calls(p))


def _replay_calls(p: OpProfile) -> int:
    per_call_ms = p.time_us / max(1, p.calls) / 1e3  # recorded: an upper bound on the op's own time
    low, high = REPLAY_CALLS
    return int(min(high, max(low, REPLAY_TARGET_MS / max(per_call_ms, 1e-3))))


def _replay(harness: Any, func: Any, samples: list[dict[str, Any]], outputs: list[dict[str, Any]], device: torch.device,
            calls: int) -> Any:
    """The op timed on its samples by the evaluator's own eager timing (rotated input copies,
    prefilled outputs, warm-up; on a GPU events after an L2 flush), or None where it cannot be."""
    from kernforge.harness.inputs import drawn_set, on_device
    from kernforge.harness.session import time_op

    draws = torch.Generator(device=device).manual_seed(1)  # drawn where they run: a GPU draws in ms
    try:
        sets = [on_device(drawn_set((s["args"], s["kwargs"]), draws), device) for s in samples]
        timing = time_op(harness, lambda args, kwargs, _prepared: func(*args, **kwargs), sets,
                         list(range(len(sets))), outputs, device, name="replay", calls=calls,
                         vary=False)  # eager's own time: nothing here to keep from memoising
    except Exception:  # noqa: BLE001 - an op that cannot be replayed keeps its recorded time
        return None
    return timing if timing is not None and timing.p50_ms > 0 else None


def _with_replayed(calls: list[Call], times: dict[int, float], replays: dict[str, Any]) -> dict[int, float]:
    """One pass's time per call, the replayed time per call where its signature has one."""
    return {c.index: replays[c.signature].p50_ms * 1e3 if c.signature in replays else times.get(c.index, 0.0)
            for c in calls}


def _mark_replayed(profiles: list[OpProfile], recorded: list[OpProfile], replays: dict[str, Any]) -> int:
    """Note on each profile its recorded time and, where it was replayed, the replay; the count replayed."""
    recorded_us = {p.signature: p.time_us for p in recorded}
    for p in profiles:
        p.recorded_us = recorded_us.get(p.signature, 0.0)
        timing = replays.get(p.signature)
        if timing is not None:
            p.time_from, p.replay_us_per_call, p.replay_spread = "replayed", timing.p50_ms * 1e3, timing.spread
    return sum(1 for p in profiles if p.time_from == "replayed")


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
    with quiet_native_stderr(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
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
    time_per_sig = {sig: median([p.get(sig, 0.0) for p in per_pass]) for sig in first}
    total = sum(time_per_sig.values())
    profiles = [_profile(call, counts[sig], time_per_sig[sig], total) for sig, call in first.items()]
    profiles.sort(key=lambda p: p.time_us, reverse=True)
    return Capture(model=loaded.name, device=str(loaded.device), forward_ms=forward_ms,
                   captured_ms=captured_ms, total_time_us=total, measured_total_us=measured_us,
                   repeats=len(recorders), profiles=profiles, model_class=type(loaded.module).__qualname__,
                   model_parameters=sum(p.numel() for p in loaded.module.parameters()))


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
