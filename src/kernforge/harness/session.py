"""One session of calls: how every call of a candidate (or of eager) is made, checked and timed.

A candidate cannot tell a checked call from a timed one, because there is no such
difference: every call of a session is made the same way, and any of them may be
judged.

  before each call   the input slot it will use was refilled with another set's values
                     some calls earlier (so no address ever sees the same values twice in a
                     row); a call that is not judged gets them scaled element by element, so
                     that no timed call sees values an earlier call had and a result kept
                     from an earlier call never pays; the outputs, and memory they may land
                     in, are prefilled with a value drawn for the call (prefill.py: NaN, a
                     sentinel or a value the oracle cannot produce); on a GPU, L2 is flushed
                     by a 256 MB read and the
                     GPU spins for a runway
  the call           between two CUDA events (GPU) or two reads of the host clock (CPU)
  after each call    its outputs are copied out, into a buffer that is kept where the call
                     is judged and into scratch where it is not: the same work either way

The sets the checks need (every set once, the adversarial draws among them) and a
number of timed calls, all at positions drawn at random, are judged; the others only
count for the time. A random share of timed calls also waits for the whole device
before its end event, which exposes work on other streams. Everything the loop calls
is bound when the harness is made, before any candidate loads.
"""

from __future__ import annotations

import gc
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kernforge.harness.guards import Guard
from kernforge.harness.inputs import digest, flat_span, layout_copy, tensors_of
from kernforge.harness.prefill import Prefill, Value
from kernforge.harness.timing import timing_from
from kernforge.records.timing import Timing

# Repeats: about GPU_TARGET_MS (GPU) or CPU_TARGET_MS (CPU) of calls at the reference's speed,
# within CALLS; a few warm-up calls first (page faults, OpenMP thread start, Triton's compile),
# their number drawn so that no count tells a phase.
GPU_TARGET_MS, CPU_TARGET_MS, CALLS, WARMUP = 100.0, 1000.0, (20, 500), (3, 7)
# Rotate among enough input slots to cover 4x the cache (an H200 has 50 MB of L2; 60 MB leaves
# a margin; a server CPU's last level is tens of MB), at most 16.
CACHE_BYTES = {"cuda": 60 << 20, "cpu": 32 << 20}
MAX_SLOTS = 16
# Timed calls that are also judged, at random positions: at most 8, and at most 512 MB of kept
# outputs. With the timing sets' own checks a candidate lazy on a quarter of its calls is caught
# with probability 1 - 0.75^11 = 0.96.
JUDGED_TIMED, KEPT_BYTES = 8, 512 << 20
SYNCED_SHARE, SYNCED_MAX = 0.1, 50
FLUSH_BYTES = 256 << 20
# After the flush the GPU spins for 1M cycles (about 0.5 ms) before the start event: the host has
# that long to launch the whole call, so a host held up by other workers does not leave the GPU
# idle inside the timed span (a two-launch softmax's p20-p80 spread went from 0.44-0.66 of the
# median to 0.02-0.03; bench/results/h200/timing_noise.md).
RUNWAY_CYCLES = 1_000_000
POISON_COPIES = 2
# A call that is not judged sees each floating input as set * factors[shift : shift + n]: the
# factors 1 + VARY * u, u uniform in [-1, 1], drawn once per session and input size, SHIFTS more
# than the input holds; the shift drawn per call, never the same twice in a session. Every call's
# values are new, elements move independently (a kept result cannot be rescaled or patched up row
# by row), and zeros, signs, NaN and inf stay what they were. The refill that copies the set into
# the slot does it in the same pass (mul with out=). Factors are float16 for 16-bit inputs: steps
# of 2^-10, finer than bfloat16's, at the input's size in memory.
VARY, SHIFTS = 2.0 ** -6, 4096
Varied = Callable[[torch.Tensor], torch.Tensor]  # a span -> this call's factors for it


@dataclass
class Call:
    """One judged call: which set it ran on, what it returned and what it left behind."""

    position: int
    set_index: int
    outputs: list[torch.Tensor]  # copies of its outputs, on the CPU
    out_meta: list[dict[str, Any]]  # shape, stride, dtype, storage ptr and bytes, per output
    in_meta: list[dict[str, Any]]  # storage ptr and bytes, per input tensor
    digests: list[list[int]]  # per input tensor, after the call (inputs.digest)
    prefill: list[Value] = field(default_factory=list)  # per output, what it held before the call


@dataclass
class SessionResult:
    timing: Timing | None
    judged: list[Call] = field(default_factory=list)
    failure: dict[str, Any] | None = None  # {"status", "reason"}: the candidate raised or returned no tensor
    calls: int = 0
    events_ms: float = 0.0  # the sum of every call's own measured time (host-clock agreement)
    host_s: float = 0.0  # the session's own host time from its first call to its end
    live_outputs: int = 0  # outputs of earlier calls still held by someone after the session


@dataclass
class Plan:
    """What one session runs: the sets (on the device), which of them timed calls rotate among,
    which are judged once each, how many timed calls, and how many of those are judged."""

    sets: list[Any]
    timing: list[int]
    checks: list[int] = field(default_factory=list)
    calls: int = 0  # timed calls; 0: none (an untimed session: the checks only)
    judged_timed: int = 0
    labels: list[str] = field(default_factory=list)
    vary: bool = True  # calls that are not judged see their sets scaled (False: an op that refuses that)
    # Blocks of the outputs' sizes filled and freed before each call, where the candidate allocates
    # its outputs (Prefill.poison). A native kernel writes into outputs the harness made and
    # prefilled, so for it, and for eager timed beside it, they only cost: 7.2 of a CPU worker's
    # 22 s for a 33.5 MB group norm (bench/results/cpu/issue34/README.md).
    poison: bool = True


def reps_for(reference_ms: float, device: torch.device) -> int:
    target = GPU_TARGET_MS if device.type == "cuda" else CPU_TARGET_MS
    return int(min(CALLS[1], max(CALLS[0], target / max(reference_ms, 1e-3))))


def judged_timed_for(output_bytes: int) -> int:
    return max(3, min(JUDGED_TIMED, KEPT_BYTES // max(1, output_bytes)))


def make_harness(device: torch.device, mark_fd: int | None = None) -> Callable[..., SessionResult]:
    """The session runner, with every clock, event and copy it uses bound now (call this before
    a candidate loads: a patched torch.cuda.Event or time.perf_counter cannot reach it)."""
    perf = time.perf_counter
    collect, freeze, unfreeze = gc.collect, gc.freeze, gc.unfreeze
    write = os.write
    Event = torch.cuda.Event
    synchronize = torch.cuda.synchronize
    spin = getattr(torch.cuda, "_sleep", None)
    tsum, empty, uint8, boolean, mul = torch.sum, torch.empty, torch.uint8, torch.bool, torch.mul
    copy_ = torch.Tensor.copy_
    Tensor = torch.Tensor
    draw, fill, poison = Prefill.draw, Prefill.fill, Prefill.poison
    from torch.multiprocessing.reductions import StorageWeakRef

    cuda = device.type == "cuda"

    def mark(what: bytes) -> None:
        if mark_fd is not None:
            try:
                write(mark_fd, what)
            except OSError:
                pass

    def run(fn: Callable[..., Any], plan: Plan, prepare: Callable[[], Any] | None, prefill: Prefill,
            seed: int, name: str = "", warmup: int | None = None, guard: Any = None) -> SessionResult:
        """fn(args, kwargs, prepared) -> outputs; prepare() -> what fn gets (outputs to write,
        for the native backends, which the session prefills), called outside the timed span;
        prefill: the outputs' metas and what each set's prefill may be (prefill.Prefill); guard: a
        guards.Guard that places the input slots and reads memory and process state around each
        call, outside the timed span. Each finished session is logged in run.sessions (name,
        calls, events_ms, host_s), in order."""
        # What existed before the session is frozen out of its garbage collection: the collect
        # that frees its outputs' cycles then walks only the session's own objects. With torch
        # imported a full collect took ~0.1 s in a fresh process and 0.2-0.5 s in a test process,
        # after every session of every worker and every signature a capture replays.
        freeze()
        try:
            return session(fn, plan, prepare, prefill, seed, name, warmup, guard)
        finally:
            unfreeze()

    def session(fn: Callable[..., Any], plan: Plan, prepare: Callable[[], Any] | None, prefill: Prefill,
                seed: int, name: str, warmup: int | None, guard: Any) -> SessionResult:
        rng = random.Random(seed)
        order = _schedule(plan, rng, warmup)
        vary = _variation(rng, plan.vary)
        slots = _slots(plan, order, guard)
        for k in range(len(slots)):  # by index: a loop variable would hold a slot past the session
            if not order[k][2]:
                _refill(slots[k], plan.sets[order[k][0]], vary(False))
        timed_calls = [n for n, (_, timed, _) in enumerate(order) if timed]
        synced = set(rng.sample(timed_calls, min(SYNCED_MAX, int(SYNCED_SHARE * len(timed_calls))))) if cuda else set()
        flush = empty(FLUSH_BYTES // 4, dtype=torch.float32, device=device) if cuda else None
        scratch.clear()
        result = SessionResult(timing=None)
        starts, ends, stream_ends, samples_host = [], [], {}, []
        refs: list[Any] = []
        half = len(slots) // 2
        mark(b"S")
        started = perf()
        for n, (set_index, timed, judged) in enumerate(order):
            ahead = n + half
            if half and ahead < len(order) and ahead >= len(slots):
                _refill(slots[ahead % len(slots)], plan.sets[order[ahead][0]], vary(order[ahead][2]))
            elif not half and n > 0:
                _refill(slots[0], plan.sets[set_index], vary(judged))
            args, kwargs = slots[n % len(slots)]
            values = draw(prefill, set_index, rng)
            prepared = prepare() if prepare is not None else None
            if prepared is not None:
                fill(prefill, prepared, values)
            if plan.poison:
                poison(prefill, values, device, POISON_COPIES)
            if guard is not None:
                guard.before()
            if cuda:
                tsum(flush)
                if spin is not None and RUNWAY_CYCLES:
                    spin(RUNWAY_CYCLES)
                start, end = Event(enable_timing=True), Event(enable_timing=True)
                start.record()
            else:
                t0 = perf()
            try:
                out = fn(args, kwargs, prepared)
            except Exception as e:  # noqa: BLE001 - the candidate's failure is data
                mark(b"E")
                label = plan.labels[set_index] if plan.labels else f"set {set_index}"
                result.failure = {"status": failure_kind(e), "reason": f"on {label}: {type(e).__name__}: {e}"[-4000:]}
                return result
            if cuda:
                if n in synced:
                    stream_end = Event(enable_timing=True)
                    stream_end.record()
                    synchronize()
                    stream_ends[n] = stream_end
                end.record()
                starts.append(start)
                ends.append(end)
            else:
                samples_host.append((perf() - t0) * 1e3)
            outs, why = _plain_outputs(out)
            if guard is not None and not why:
                guard.after(n, tensors_of((args, kwargs)), outs, prepared is None)
            if why:
                mark(b"E")
                result.failure = {"status": "wrong_result", "reason": why}
                return result
            refs += [StorageWeakRef(o.untyped_storage()) for o in outs if prepared is None]
            kept = _copy_out(outs, judged)
            if judged:
                result.judged.append(Call(position=n, set_index=set_index, outputs=kept,
                                          out_meta=[_meta(o) for o in outs],
                                          in_meta=[_storage(t) for t in tensors_of((args, kwargs))],
                                          digests=[digest(t) for t in tensors_of((args, kwargs))],
                                          prefill=values))
            del out, outs
        if cuda:
            synchronize()
        result.host_s = perf() - started
        mark(b"E")
        result.calls = len(order)
        if cuda:
            times = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        else:
            times = samples_host
        result.events_ms = sum(times)
        timed_plain = sorted(t for n, t in enumerate(times) if order[n][1] and n not in synced)
        if timed_plain:
            synced_times = [times[n] for n in sorted(stream_ends)]
            gaps = [stream_ends[n].elapsed_time(ends[n]) for n in sorted(stream_ends)]
            result.timing = timing_from(timed_plain, "cuda-events,l2-flush-read,runway,rotated,refilled" if cuda
                                    else "wall-clock,rotated,refilled",
                                    synced_ms=sorted(synced_times)[len(synced_times) // 2] if synced_times else None,
                                    sync_gap_ms=min(gaps) if gaps else None,
                                    host_ms=result.host_s * 1e3 / max(1, len(order)))
            result.timing.copies = len(slots)
        for call in result.judged:
            call.outputs = [t.cpu() for t in call.outputs]
            call.digests = [[int(v) for v in d.tolist()] for d in call.digests]
        del slots, args, kwargs, prepared
        if guard is not None:
            guard.finish()  # lets go of the input slots: an in-place op's outputs live in them
        scratch.clear()
        collect()  # Triton's interpreter holds launch arguments in reference cycles for a while
        result.live_outputs = sum(1 for r in refs if not r.expired())
        sessions.append({"name": name, "calls": result.calls, "events_ms": result.events_ms,
                         "host_s": result.host_s})
        return result

    def _schedule(plan: Plan, rng: random.Random, warmup: int | None) -> list[tuple[int, bool, bool]]:
        """(set, timed, judged) per call: warm-up calls, then timed calls with the checks among
        them at random positions. Each call's set differs from the last one on its slot."""
        warm = rng.randint(*WARMUP) if warmup is None else warmup
        timed_count = plan.calls
        total = (warm + timed_count + len(plan.checks)) if timed_count else len(plan.checks)
        kinds = [("timed", None)] * total
        positions = list(range(total))
        rng.shuffle(positions)
        check_at = positions[:len(plan.checks)]
        timed_positions = [p for p in range(warm if timed_count else 0, total) if p not in set(check_at)]
        judged_timed = set(rng.sample(timed_positions, min(plan.judged_timed, len(timed_positions))))
        for p, s in zip(check_at, plan.checks):
            kinds[p] = ("check", s)
        slots = _slot_count(plan)
        last: dict[int, int] = {}
        order = []
        for p, (kind, s) in enumerate(kinds):
            slot = p % slots
            if kind == "timed":
                choices = [t for t in plan.timing if t != last.get(slot)] or plan.timing
                s = rng.choice(choices)
            last[slot] = s
            timed = kind == "timed" and bool(timed_count) and p >= warm
            order.append((s, timed, kind == "check" or p in judged_timed))
        return order

    def _slot_count(plan: Plan) -> int:
        size = max(1, sum(t.numel() * t.element_size() for t in tensors_of(plan.sets[0])))
        if not plan.calls:
            return 1
        return max(1, min(MAX_SLOTS, math.ceil(4 * CACHE_BYTES.get(device.type, 0) / size)))

    def _slots(plan: Plan, order: list[tuple[int, bool, bool]], guard: Any = None) -> list[Any]:
        """Layout copies of the sets the first calls use, one per slot (between canaries, with a guard)."""
        from torch.utils._pytree import tree_map

        count = min(_slot_count(plan), len(order)) or 1
        if guard is None:
            return [tree_map(lambda x: layout_copy(x) if isinstance(x, Tensor) else x, plan.sets[order[k][0]])
                    for k in range(count)]
        return [_guarded_set(plan.sets[order[k][0]], guard) for k in range(count)]

    def _guarded_set(values: Any, guard: Any) -> Any:
        from torch.utils._pytree import tree_flatten, tree_unflatten

        leaves, spec = tree_flatten(values)
        placed, j = [], 0
        for x in leaves:
            placed.append(guard.place(x, f"input {j}") if isinstance(x, Tensor) else x)
            j += isinstance(x, Tensor)
        return tree_unflatten(placed, spec)

    def _variation(rng: random.Random, wanted: bool) -> Callable[[bool], Varied | None]:
        """vary(judged): None for a judged call (the oracle knows its set's values exactly) or
        where not `wanted`, else this call's factors: a tensor's span -> what to multiply it by."""
        generator = torch.Generator(device=device).manual_seed(rng.getrandbits(62))
        factors: dict[tuple[int, torch.dtype], Tensor] = {}
        shifts = rng.sample(range(SHIFTS), SHIFTS)

        def factors_of(span: Tensor) -> Tensor:
            kind = torch.float16 if span.element_size() == 2 else torch.float32
            if span.dtype == torch.bfloat16 and device.type == "cpu":
                # ATen's CPU mul of bfloat16 by float16 takes its slow mixed-dtype path: 35 ms for
                # 8.4M elements on 2 cores against 1.0 ms by bfloat16 factors (steps of 2^-8 near
                # 1, still within 1 +- VARY), and a refill is paid on every call not judged
                kind = torch.bfloat16
            key = (span.numel(), kind)
            if key not in factors:
                factors[key] = empty(key[0] + SHIFTS, dtype=kind, device=device).uniform_(
                    1.0 - VARY, 1.0 + VARY, generator=generator)
            return factors[key]

        def vary(judged: bool) -> Varied | None:
            if judged or not wanted:
                return None
            shift = shifts.pop() if shifts else rng.randrange(SHIFTS)
            return lambda span: factors_of(span)[shift:shift + span.numel()]

        return vary

    def _refill(slot: Any, values: Any, varied: Varied | None = None) -> None:
        for dst, src in zip(tensors_of(slot), tensors_of(values)):
            into, source = flat_span(dst), flat_span(src)
            if varied is None or not into.is_floating_point():
                copy_(into, source, non_blocking=True)
                continue
            if source.device != into.device:
                copy_(into, source, non_blocking=True)
                source = into
            mul(source, varied(into), out=into)

    def _copy_out(outs: list[torch.Tensor], keep: bool) -> list[torch.Tensor]:
        kept = []
        for o in outs:
            if keep:
                dst = empty(o.shape, dtype=o.dtype, device=o.device)
                kept.append(dst)
            else:
                key = (tuple(o.shape), o.dtype, str(o.device))
                if key not in scratch:
                    scratch[key] = empty(o.shape, dtype=o.dtype, device=o.device)
                dst = scratch[key]
            if o.dtype == boolean:  # byte for byte: a copy would turn a prefill byte of 2 into True
                dst, o = dst.view(uint8), o.view(uint8)
            copy_(dst, o, non_blocking=True)
        return kept

    scratch: dict[tuple, torch.Tensor] = {}  # where the outputs of calls not judged are copied
    sessions: list[dict[str, Any]] = []

    def _plain_outputs(out: Any) -> tuple[list[torch.Tensor], str | None]:
        from torch.utils._pytree import tree_flatten

        leaves = [out] if type(out) is Tensor else tree_flatten(out)[0]
        for i, leaf in enumerate(leaves):
            if type(leaf) is not Tensor:
                return [], f"output {i} is a {type(leaf).__module__}.{type(leaf).__qualname__}, not a torch.Tensor"
            if leaf.device.type != device.type:
                return [], f"output {i} is on {leaf.device}, the inputs on {device}"
        return leaves, None

    run.sessions = sessions  # type: ignore[attr-defined]
    return run


def time_op(harness: Any, fn: Any, dev_sets: list[Any], timing_sets: list[int], outputs: list[dict[str, Any]],
            device: torch.device, seed: int = 0, name: str = "eager", calls: int | None = None,
            judged_like_a_candidate: bool = False, prefill_options: list[list[Any]] | None = None,
            vary: bool = True, poison: bool = True) -> Any:
    """A reference's timing (eager, torch.compile): unless `calls` is given, a short session for
    its speed first, then one of reps_for that speed. judged_like_a_candidate: that session judges
    as many calls as a candidate's does (each set once, judged_timed_for its outputs), its results
    dropped, so that its wall time a call is the harness's cost for a candidate's session too:
    runner.host_clock_disagrees reads it (a judged call allocates its kept outputs and digests its
    inputs: on 256 MB outputs on the H200 that cost ~10x the call, and honest kernels were
    taken for patched timers, bench/results/h200/issue20/README.md), and with a guards.Guard
    around each call as a candidate's. prefill_options: the candidate's (the job's), so that
    eager's calls are prefilled as its calls are; vary: whether calls not judged see their sets
    scaled, as the candidate's do (varies_safely); poison: whether the outputs' blocks are poisoned
    before each call, as the candidate's are (Plan.poison)."""
    prefill = Prefill(output_metas(outputs), prefill_options)
    if calls is None:
        probe = harness(fn, Plan(sets=dev_sets, timing=timing_sets, calls=CALLS[0], vary=vary, poison=poison), None,
                        prefill, seed, name=f"{name}-probe")
        calls = reps_for(_timing_of(probe, f"{name}-probe").p50_ms, device)
    plan = Plan(sets=dev_sets, timing=timing_sets, calls=calls, vary=vary, poison=poison)
    guard = None
    if judged_like_a_candidate:
        plan.checks = list(range(len(dev_sets)))
        plan.judged_timed = judged_timed_for(sum(m["nbytes"] for m in prefill.metas))
        guard = Guard(device)  # the same reads around each call as a candidate's; what it sees is dropped
    return _timing_of(harness(fn, plan, None, prefill, seed + 1, name=name, guard=guard), name)


class ReferenceFailed(RuntimeError):
    """A reference (eager, a compiled peer) that raised or returned no tensor in a timed session."""


def _timing_of(session: SessionResult, name: str) -> Any:
    if session.failure is not None or session.timing is None:
        why = (session.failure or {}).get("reason", "no timing")
        raise ReferenceFailed(f"{name} failed in its timed session: {why}")
    return session.timing


def varies_safely(fn: Callable[..., Any], values: Any, device: torch.device) -> bool:
    """Whether the reference takes a set scaled as calls that are not judged see it (every
    floating input times 1 +- VARY): an op whose domain ends where the set's values do (a binary
    cross-entropy of probabilities at 1) raises on it, and then no call is varied."""
    from torch.utils._pytree import tree_map

    generator = torch.Generator(device=device).manual_seed(0)

    def scaled(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        x = layout_copy(x, device)
        if x.is_floating_point():
            span = flat_span(x)
            span.mul_(torch.empty(span.shape, device=device).uniform_(1.0 - VARY, 1.0 + VARY, generator=generator)
                      .to(span.dtype))
        return x

    args, kwargs = tree_map(scaled, values)
    try:
        fn(args, kwargs, None)
    except Exception:  # noqa: BLE001 - any refusal means the same
        return False
    return True


def time_callable(fn: Callable[[], Any], device: torch.device) -> Timing:
    """fn() timed as the evaluator times a call (for the probes in bench/): one session of calls
    with no inputs and nothing judged."""
    harness = make_harness(device)
    nothing = Prefill([])  # no outputs to prefill
    probe = harness(lambda a, k, p: fn(), Plan(sets=[([], {})], timing=[0], calls=CALLS[0]), None, nothing, 0)
    calls = reps_for(probe.timing.p50_ms, device)
    return harness(lambda a, k, p: fn(), Plan(sets=[([], {})], timing=[0], calls=calls), None, nothing, 1).timing


def _meta(t: torch.Tensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "stride": list(t.stride()), "dtype": str(t.dtype), **_storage(t)}


def _storage(t: torch.Tensor) -> dict[str, Any]:
    """The bytes of memory a tensor spans: [ptr, ptr + nbytes)."""
    span = flat_span(t) if t.numel() else t
    return {"ptr": int(span.data_ptr()), "nbytes": int(span.numel() * span.element_size())}


def failure_kind(e: BaseException) -> str:
    if isinstance(e, MemoryError) or "out of memory" in str(e).lower() or "can't allocate" in str(e).lower():
        return "out_of_memory"
    # Triton compiles a kernel at its first launch, so its compile errors arrive here.
    return "compile_error" if type(e).__module__.startswith("triton") else "runtime_error"


def output_metas(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The task's output metas with the bytes each spans (what the prefill fills)."""
    metas = []
    for meta in outputs:
        dtype = getattr(torch, meta["dtype"].replace("torch.", ""))
        numel = 1 + sum((size - 1) * stride for size, stride in zip(meta["shape"], meta["stride"]))
        metas.append({**meta, "nbytes": numel * torch.empty((), dtype=dtype).element_size()})
    return metas
