"""Guarded memory and process state around a candidate's calls, observed in its worker.

The worker (session.py) places every input slot and, for the native backends, every output
it hands a kernel inside a larger buffer: CANARY_BYTES of random bytes before and after the
tensor's span, and in the gaps of a strided output. Around every call of the session, judged
or not, it reads what a kernel can change without touching its outputs' values:

  canaries       a write past a tensor's end (or before its start, or into an output's gaps)
                 changes bytes no correct kernel touches; a read past the end changes nothing
                 and is not seen here (on a GPU, compute-sanitizer memcheck of a finalist is
                 the complement; not run yet)
  FP control     x87 control word and MXCSR (rounding, flush-to-zero, denormals-are-zero,
                 exception masks) on x86-64, fegetround elsewhere: a kernel that leaves them
                 changed changes every computation after it, eager's and the judge's included
  heap           glibc's bytes in use (mallinfo2) before and after the call, less what the
                 call returned: memory a call takes and never gives back (on a random sample
                 of the calls: HEAP_FIRST, HEAP_SHARE)
  device memory  torch.cuda.memory_allocated around the call, on a GPU
  threads        /proc/self/task before and after the call (a count that changes over more
                 than one call); the current stream on a GPU

This module decides nothing. `Guard.report()` is plain numbers that go into the worker's
outputs file; judge.guard_verdict reads them in the search process, where the thresholds are.
The before/after reads sit outside the timed span (before the start event or clock read,
after the end), so they cost the candidate no time; their cost per call is a few small tensor
ops and a few syscalls (bench/judge_cost.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
import random
from dataclasses import dataclass
from typing import Any

import torch

from kernforge.harness.serialize import extent

# 4 KiB of canary before and after each tensor: a write one element past the end lands in it,
# and so does one a row (a 1024-float row) past it. Checked after every call: 2 x 4 KiB per
# tensor is ~1 us of compare on a CPU, one small kernel on a GPU.
CANARY_BYTES = 4096
# Gaps of a strided output are watched only up to this many bytes: beyond it the watch list
# itself would cost more than the call.
GAP_WATCH_MAX = 1 << 20
# The heap is read around the first HEAP_FIRST calls and a random HEAP_SHARE of the others:
# mallinfo2 walks every free chunk, 0.6 us in a fresh process but ~50 us in a worker with torch
# loaded, and a leak of every call shows in any sample (500 calls: ~23 samples).
HEAP_FIRST, HEAP_SHARE = 8, 0.03


@dataclass
class Guarded:
    """One tensor in its guarded buffer: the bytes watched and what they must hold."""

    label: str  # "input 0", "output 1"
    base: torch.Tensor  # the whole buffer, uint8
    watch: torch.Tensor  # byte positions in base that no kernel may write (int64, on the device)
    expected: torch.Tensor  # what base[watch] holds (uint8)
    lead: int  # bytes before the span (where "before" ends)
    span_bytes: int

    def mismatches(self) -> torch.Tensor | int:
        """Count of watched bytes changed: on a GPU a 0-d tensor on the device (no sync); on a CPU
        0, or 1 when any changed (memcmp of the two canaries: tensor ops here cost ~6 ms a call on
        a busy 2-core machine, waking torch's thread pool)."""
        if self.base.device.type != "cpu" or self.expected.numel() != 2 * self.lead:
            return torch.ne(self.base[self.watch], self.expected).sum()
        ptr, lead, end = self.base.data_ptr(), self.lead, self.lead + self.span_bytes
        expected = self.expected.data_ptr()
        return int(_memcmp(ptr, expected, lead) != 0 or _memcmp(ptr + end, expected + lead, lead) != 0)

    def where(self) -> dict[str, int]:
        """Changed bytes before the span, after it and in its gaps, with the first one after the end."""
        watch = self.watch
        if self.base.device.type == "cpu" and self.expected.numel() == 2 * self.lead:  # canaries only
            watch = torch.cat([torch.arange(0, self.lead), torch.arange(self.lead + self.span_bytes, self.base.numel())])
        changed = watch[torch.ne(self.base[watch], self.expected)].cpu()
        before = int((changed < self.lead).sum())
        after_mask = changed >= self.lead + self.span_bytes
        after = int(after_mask.sum())
        return {"before": before, "after": after, "gaps": int(changed.numel()) - before - after,
                "first_after": int(changed[after_mask].min()) - self.lead - self.span_bytes if after else -1}


def guarded_copy(t: torch.Tensor, label: str, gaps: bool = False) -> tuple[torch.Tensor, Guarded | None]:
    """A copy of t with its layout (layout_copy's), placed CANARY_BYTES into a buffer whose bytes
    around it are random; gaps: also watch the bytes between its elements (outputs). A tensor
    with no elements is copied plainly (nothing to overrun)."""
    if t.numel() == 0:
        return t.detach().clone(), None
    size = t.element_size()
    span = extent(t)
    lead = CANARY_BYTES // size  # elements; CANARY_BYTES keeps the span 64-byte aligned as layout_copy's
    total = lead + span + CANARY_BYTES // size
    base = torch.empty(total * size, dtype=torch.uint8, device=t.device)
    start, end = lead * size, (lead + span) * size
    canary = torch.frombuffer(bytearray(os.urandom(2 * start)), dtype=torch.uint8).to(t.device)
    base[:start].copy_(canary[:start])
    base[end:].copy_(canary[start:])
    view = base.view(t.dtype).as_strided(t.shape, t.stride(), lead)
    # the whole span as it lies in t's storage: an expanded input (stride 0) cannot be copied
    # element by element into a view whose elements share memory
    base.view(t.dtype)[lead:lead + span].copy_(t.detach().as_strided((span,), (1,), t.storage_offset()))
    gap = _gap_bytes(t, lead, size) if gaps else None
    if gap is not None and gap.numel():
        seed = int.from_bytes(os.urandom(8), "little") >> 1
        fill = torch.randint(0, 256, (gap.numel(),), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
        base[gap.to(t.device)] = fill.to(t.device)
    if gap is None or not gap.numel():
        # the two canaries only: compared with memcmp on a CPU (Guarded.mismatches)
        watch = torch.cat([torch.arange(0, start), torch.arange(end, total * size)]).to(t.device) \
            if t.device.type != "cpu" else torch.empty(0, dtype=torch.int64)
        return view, Guarded(label, base, watch, canary, start, span * size)
    watch = torch.cat([torch.arange(0, start), torch.arange(end, total * size), gap]).to(t.device)
    return view, Guarded(label, base, watch, base[watch].clone(), start, span * size)


def _gap_bytes(t: torch.Tensor, lead: int, size: int) -> torch.Tensor:
    """Byte positions inside t's span that none of its elements covers (a strided layout's gaps)."""
    span = extent(t)
    if span == t.numel() or (span - t.numel()) * size > GAP_WATCH_MAX:
        return torch.empty(0, dtype=torch.int64)
    covered = torch.zeros(span, dtype=torch.bool)
    covered.as_strided(t.shape, t.stride(), 0).fill_(True)
    elements = (~covered).nonzero().flatten() + lead
    return (elements[:, None] * size + torch.arange(size)[None, :]).flatten()


_memcmp = ctypes.CDLL(None).memcmp
_memcmp.restype = ctypes.c_int
_memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]


# ---------------------------------------------------------------- process state

class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _libc() -> Any:
    try:
        return ctypes.CDLL(None)  # the process's own symbols: libc is loaded (find_library runs ldconfig: ms)
    except OSError:
        return None


@functools.cache
def heap_reader() -> Any:
    """A function giving glibc's heap bytes in use (arena chunks in use plus mmapped chunks), or
    None where there is no mallinfo2 (not glibc, or glibc before 2.33)."""
    libc = _libc()
    mallinfo2 = getattr(libc, "mallinfo2", None) if libc is not None else None
    if mallinfo2 is None:
        return None
    mallinfo2.restype = _MallInfo2
    mallinfo2.argtypes = []

    def in_use() -> int:
        info = mallinfo2()
        return int(info.uordblks + info.hblkhd)
    return in_use


@functools.cache
def fp_reader() -> Any:
    """A function giving the FP control state as a tuple of ints: on x86-64 (x87 control word,
    MXCSR without its sticky exception flags) from fegetenv's fenv_t, elsewhere fegetround()."""
    try:
        libm = ctypes.CDLL("libm.so.6")
    except OSError:
        libm = ctypes.CDLL(ctypes.util.find_library("m"))
    if platform.machine() in ("x86_64", "AMD64"):
        fegetenv = libm.fegetenv
        env = ctypes.create_string_buffer(32)  # glibc's x86-64 fenv_t: cw at 0, mxcsr at 28

        def control() -> tuple[int, ...]:
            fegetenv(env)
            raw = env.raw
            return (int.from_bytes(raw[0:2], "little") & 0x1F3F, int.from_bytes(raw[28:32], "little") & ~0x3F)
        return control
    fegetround = libm.fegetround
    return lambda: (int(fegetround()),)


def thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1


# ---------------------------------------------------------------- the guard

class Guard:
    """What one candidate session's calls did to memory and process state.

    Lifecycle (session.py): `place` while the session makes its input slots (and the worker its
    native outputs), `before` right before each call's start event or clock read, `after` right
    after its end, outside the timed span, `finish` once the session is over, then `report`."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.by_ptr: dict[int, Guarded] = {}
        self.heap = heap_reader() if device.type == "cpu" else None
        self.fp = fp_reader()
        self.fp_start = self.fp()
        self.counts: list[tuple[int, list[torch.Tensor]]] = []  # per call: the guarded tensors' mismatch counts
        self.labels: list[list[str]] = []
        self.heap_deltas: list[int] = []  # bytes in use after a call less before it, less what it returned
        self.device_deltas: list[int] = []
        self.fp_changes: list[dict[str, Any]] = []
        self.thread_changes: list[dict[str, int]] = []
        self.stream_changes: list[int] = []
        self._before: tuple[int, int, int, Any] = (0, 0, 0, None)
        self._calls = 0
        self._heap_now = False
        self._pick = random.Random(int.from_bytes(os.urandom(4), "little"))  # which calls: nowhere a kernel reads
        self._report: dict[str, Any] | None = None  # made by finish()

    def place(self, t: torch.Tensor, label: str, gaps: bool = False) -> torch.Tensor:
        view, guarded = guarded_copy(t, label, gaps)
        if guarded is not None:
            self.by_ptr[view.data_ptr()] = guarded
        return view

    def place_outputs(self, outputs: list[torch.Tensor]) -> list[torch.Tensor]:
        return [self.place(t, f"output {i}", gaps=True) for i, t in enumerate(outputs)]

    def before(self) -> None:
        self._heap_now = self.heap is not None and (self._calls < HEAP_FIRST or self._pick.random() < HEAP_SHARE)
        self._calls += 1
        heap = self.heap() if self._heap_now else 0
        dev = torch.cuda.memory_allocated(self.device) if self.cuda else 0
        stream = torch.cuda.current_stream(self.device).cuda_stream if self.cuda else None
        self._before = (heap, dev, thread_count(), stream)

    def after(self, n: int, inputs: list[torch.Tensor], outputs: list[torch.Tensor], fresh_outputs: bool) -> None:
        """n: the call's position; inputs and outputs as the kernel got or returned them;
        fresh_outputs: the call allocated its outputs (a Python candidate), so their bytes are
        not a leak."""
        heap0, dev0, threads0, stream0 = self._before
        returned = sum(o.numel() * o.element_size() for o in outputs) if fresh_outputs else 0
        if self._heap_now:
            self.heap_deltas.append(self.heap() - heap0 - returned)
        if self.cuda:
            self.device_deltas.append(torch.cuda.memory_allocated(self.device) - dev0 - returned)
            if torch.cuda.current_stream(self.device).cuda_stream != stream0:
                self.stream_changes.append(n)
        threads = thread_count()
        if threads != threads0:
            self.thread_changes.append({"call": n, "before": threads0, "after": threads})
        state = self.fp()
        if state != self.fp_start and len(self.fp_changes) < 4:
            self.fp_changes.append({"call": n, "before": list(self.fp_start), "after": list(state)})
        watched = [g for t in [*inputs, *outputs] if (g := self.by_ptr.get(t.data_ptr())) is not None]
        if watched:
            self.counts.append((n, [g.mismatches() for g in watched]))
            self.labels.append([g.label for g in watched])

    def finish(self) -> None:
        """The session is over: its report is made now and the guarded buffers are let go, so that
        the session's count of outputs still held sees only what someone other than the harness keeps."""
        self._report = self.report()
        self.by_ptr.clear()

    def report(self) -> dict[str, Any]:
        """Plain data for the judge: every call whose canaries changed (the first few, with where),
        the FP state changes, each call's heap and device-memory growth, thread and stream changes."""
        if self._report is not None:
            return self._report
        overruns = []
        for (n, counts), labels in zip(self.counts, self.labels):
            for count, label in zip([int(c) for c in counts], labels):
                if count and len(overruns) < 4:
                    overruns.append({"call": n, "tensor": label})
        if overruns:
            places = [g.where() for g in self.by_ptr.values() if g.label == overruns[0]["tensor"]]
            overruns[0].update(next((w for w in places if w["before"] + w["after"] + w["gaps"]), {}))
            overruns[0]["bytes"] = sum(overruns[0].get(k, 0) for k in ("before", "after", "gaps"))
        return {"overruns": overruns, "fp_changes": self.fp_changes, "fp_start": list(self.fp_start),
                "heap_deltas": self.heap_deltas, "device_deltas": self.device_deltas,
                "thread_changes": self.thread_changes[:8], "stream_changes": self.stream_changes[:8]}


# ---------------------------------------------------------------- the verdict (search process)

# A leak: the median call keeps more than LEAK_BYTES_PER_CALL and the calls together more than
# LEAK_BYTES_TOTAL. The allowance covers what an honest Python candidate's call keeps besides
# its outputs' bytes (torch's TensorImpl and StorageImpl of each returned tensor: a few hundred
# bytes); a leak of a few bytes a call is not seen.
LEAK_BYTES_PER_CALL, LEAK_BYTES_TOTAL = 1024, 64 << 10
# On a GPU the caching allocator rounds each block to 512 bytes; a leak of a workspace per call
# is still over this within a few calls.
DEVICE_LEAK_BYTES_TOTAL = 1 << 20
_ROUNDING = {0: "to nearest", 1: "down", 2: "up", 3: "toward zero"}


def verdict(report: dict[str, Any] | None) -> tuple[str, str, str] | None:
    """(status, reason, check) for what a session's guard saw, or None when nothing is wrong.
    Runs in the search process on the plain data Guard.report wrote."""
    if not report:
        return None
    for why in (_overrun(report), _fp(report), _leak(report.get("heap_deltas", []), LEAK_BYTES_TOTAL, "heap"),
                _leak(report.get("device_deltas", []), DEVICE_LEAK_BYTES_TOTAL, "device memory"),
                _threads(report), _stream(report)):
        if why:
            return why
    return None


def _overrun(report: dict[str, Any]) -> tuple[str, str, str] | None:
    if not report.get("overruns"):
        return None
    first = report["overruns"][0]
    where = []
    if first.get("after"):
        where.append(f"{first['after']} past its end, from byte {first['first_after']} after it")
    if first.get("before"):
        where.append(f"{first['before']} before its start")
    if first.get("gaps"):
        where.append(f"{first['gaps']} in the gaps between its elements")
    return ("wrong_result", f"call {first['call']} wrote outside {first['tensor']}: {first['bytes']} bytes of the "
                            f"canary around it changed ({', '.join(where) or 'outside its span'}): an out-of-bounds "
                            "write", "memory")


def _fp(report: dict[str, Any]) -> tuple[str, str, str] | None:
    if not report.get("fp_changes"):
        return None
    change = report["fp_changes"][0]
    return ("cheat", f"call {change['call']} left the FP control state changed: {_fp_words(change['before'])} -> "
                     f"{_fp_words(change['after'])}; every computation after it (eager's, the harness's) runs "
                     "under it", "state")


def _fp_words(state: list[int]) -> str:
    if len(state) == 1:
        return f"rounding mode {state[0]}"
    cw, mxcsr = state
    flags = [name for bit, name in ((15, "flush-to-zero"), (6, "denormals-are-zero")) if mxcsr >> bit & 1]
    return (f"MXCSR 0x{mxcsr:04x} (rounding {_ROUNDING[mxcsr >> 13 & 3]}{', ' + ', '.join(flags) if flags else ''}), "
            f"x87 control word 0x{cw:04x} (rounding {_ROUNDING[cw >> 10 & 3]})")


def _leak(deltas: list[int], total_over: int, what: str) -> tuple[str, str, str] | None:
    if len(deltas) < 4:
        return None
    median = sorted(deltas)[len(deltas) // 2]
    total = sum(deltas)
    if median <= LEAK_BYTES_PER_CALL or total <= total_over:
        return None
    return ("wrong_result", f"leaks {what}: the median call kept {median} bytes it did not return, "
                            f"{total} bytes over {len(deltas)} calls", "state")


def _threads(report: dict[str, Any]) -> tuple[str, str, str] | None:
    """The thread count changed over more than one call. Once is allowed: a thread pool that starts
    at its first use (torch's intra-op pool on a Python candidate's first torch op) grows the count
    once and then holds it; a thread that stays and runs is the worker's `threads` check."""
    if len(report.get("thread_changes", [])) < 2:
        return None
    change = report["thread_changes"][0]
    return ("cheat", f"the thread count went from {change['before']} to {change['after']} over call {change['call']} "
                     f"(and changed on {len(report['thread_changes'])} call(s)): threads started or ended outside "
                     "the call's own work", "state")


def _stream(report: dict[str, Any]) -> tuple[str, str, str] | None:
    if not report.get("stream_changes"):
        return None
    return ("cheat", f"call {report['stream_changes'][0]} left another CUDA stream current", "state")
