"""Guarded memory and process state (kernforge.harness.guards), in process (no worker).

A session runs on the CPU with small Python callables standing in for kernels, each doing
what a cheating or broken kernel does to memory or process state while returning the right
values; guards.verdict must name it. Honest callables, Python and native-like, must pass.
The same cheats as C kernels through the real pipeline: tests/redteam/cases/c-write-past-end.c,
c-leak-workspace.c, c-mxcsr-round-left.c (test_redteam.py).
"""

from __future__ import annotations

import ctypes
import re
import threading

import pytest
import torch

from kernforge.harness.guards import CANARY_BYTES, LEAK_BYTES_PER_CALL, Guard, verdict
from kernforge.harness.prefill import Prefill
from kernforge.harness.session import Plan, make_harness
from kernforge.evaluate.worker import _candidate_call

pytestmark = pytest.mark.unit

CPU = torch.device("cpu")
LIBC = ctypes.CDLL(None)
LIBM = ctypes.CDLL("libm.so.6")
FE_TOWARDZERO = 0xC00  # x86's value (glibc's fenv.h)


def softmax_sets(count: int = 4) -> list:
    gen = torch.Generator().manual_seed(0)
    return [([torch.randn(3, 8, generator=gen), -1, False], {}) for _ in range(count)]


def meta(stride=(8, 1)) -> list[dict]:
    return [{"shape": [3, 8], "stride": list(stride), "dtype": "torch.float32",
             "nbytes": 4 * (1 + 2 * stride[0] + 7 * stride[1])}]


def session(fn, calls: int = 40, prepare=None, guard: Guard | None = None, stride=(8, 1)) -> dict:
    guard = guard or Guard(CPU)
    plan = Plan(sets=softmax_sets(), timing=[0, 1, 2, 3], checks=[0, 1, 2, 3], calls=calls, judged_timed=3)
    result = make_harness(CPU)(fn, plan, prepare, Prefill(meta(stride)), 0, name="candidate", guard=guard)
    assert result.failure is None, result.failure
    return guard.report()


def softmax(args, kwargs, _prepared):
    return torch.softmax(args[0], -1)


class NativeLike:
    """A native kernel's interface (run into outputs the harness made, new_outputs) over a
    Python body: body(x, y) writes y from x and may do more."""

    def __init__(self, body, stride=(8, 1)) -> None:
        self.body, self.stride = body, stride

    def new_outputs(self, poison: bool = True) -> list[torch.Tensor]:
        return [torch.full((3, 8), float("nan")).as_strided((3, 8), self.stride) if self.stride == (8, 1)
                else torch.full((3 * self.stride[0],), float("nan")).as_strided((3, 8), self.stride)]

    def run(self, outputs, args, kwargs):
        self.body(args[0], outputs[0])
        return outputs[0]


def native_session(body, stride=(8, 1)) -> dict:
    guard = Guard(CPU)
    fn, prepare = _candidate_call(NativeLike(body, stride), guard)
    return session(fn, prepare=prepare, guard=guard, stride=stride)


def past_the_end(t: torch.Tensor, elements: int = 1) -> torch.Tensor:
    """The elements right after t's last one (what a kernel with an off-by-one loop writes)."""
    last = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return t.as_strided((elements,), (1,), last + 1)


# ---------------------------------------------------------------- honest kernels pass

def test_an_honest_python_kernel_passes():
    assert verdict(session(softmax)) is None


def test_an_honest_native_kernel_passes_contiguous_and_strided():
    assert verdict(native_session(lambda x, y: y.copy_(torch.softmax(x, -1)))) is None
    assert verdict(native_session(lambda x, y: y.copy_(torch.softmax(x, -1)), stride=(10, 1))) is None


# ---------------------------------------------------------------- memory

def test_one_float_past_the_outputs_end_is_an_out_of_bounds_write():
    def body(x, y):
        y.copy_(torch.softmax(x, -1))
        past_the_end(y).fill_(1.0)  # scratch after the output

    status, reason, check = verdict(native_session(body))
    assert (status, check) == ("wrong_result", "memory")
    # the canary is random: a byte of 1.0 that happens to equal the canary's there is not seen
    # (about 1 run in 64), so the span found is 1 to 4 bytes within the float's 4
    assert "wrote outside output 0" in reason and re.search(r"[1-4] past its end, from byte [0-3] after", reason), reason


def test_a_write_into_a_strided_outputs_gaps_is_seen():
    def body(x, y):
        y.copy_(torch.softmax(x, -1))
        y.as_strided((1,), (1,), y.storage_offset() + 8).fill_(0.0)  # between row 0 and row 1

    status, reason, check = verdict(native_session(body, stride=(10, 1)))
    assert check == "memory" and "in the gaps between its elements" in reason, reason


def test_a_write_before_an_input_is_seen():
    def fn(args, kwargs, _prepared):
        x = args[0]
        x.as_strided((1,), (1,), x.storage_offset() - 1).fill_(0.0)  # the float before the input
        return torch.softmax(x, -1)

    status, reason, check = verdict(session(fn))
    assert check == "memory" and "outside input 0" in reason and "before its start" in reason, reason


def test_a_whole_row_past_the_end_still_lands_in_the_canary():
    def body(x, y):
        y.copy_(torch.softmax(x, -1))
        past_the_end(y, 1024)[-1:].fill_(0.0)  # the last float of a 1024-float row after the output

    assert CANARY_BYTES >= 1024 * 4
    assert verdict(native_session(body))[2] == "memory"


# ---------------------------------------------------------------- process state

def test_a_rounding_mode_left_changed_is_a_cheat():
    def fn(args, kwargs, _prepared):
        LIBM.fesetround(FE_TOWARDZERO)
        return torch.softmax(args[0], -1)

    before = LIBM.fegetround()
    try:
        status, reason, check = verdict(session(fn))
    finally:
        LIBM.fesetround(before)
    assert (status, check) == ("cheat", "state")
    assert "left the FP control state changed" in reason and "rounding toward zero" in reason, reason


def test_a_malloc_kept_every_call_is_a_leak():
    kept: list[int] = []
    LIBC.malloc.restype = ctypes.c_void_p

    def fn(args, kwargs, _prepared):
        kept.append(LIBC.malloc(16384))  # a workspace, never freed by the "kernel"
        return torch.softmax(args[0], -1)

    try:
        status, reason, check = verdict(session(fn))
    finally:
        LIBC.free.argtypes = [ctypes.c_void_p]
        for p in kept:
            LIBC.free(p)
    assert (status, check) == ("wrong_result", "state")
    assert "leaks heap" in reason and "16" in reason, reason


def test_memory_freed_within_the_call_and_the_returned_outputs_are_no_leak():
    LIBC.malloc.restype = ctypes.c_void_p
    LIBC.free.argtypes = [ctypes.c_void_p]

    def fn(args, kwargs, _prepared):
        LIBC.free(LIBC.malloc(1 << 20))
        return torch.softmax(args[0], -1).clone()  # a fresh output, handed back

    report = session(fn)
    assert verdict(report) is None
    assert sorted(report["heap_deltas"])[len(report["heap_deltas"]) // 2] <= LEAK_BYTES_PER_CALL


def test_a_thread_started_by_a_call_and_left_is_a_cheat():
    stop = threading.Event()
    started: list[threading.Thread] = []

    def fn(args, kwargs, _prepared):
        if len(started) < 5:
            t = threading.Thread(target=stop.wait, daemon=True)  # waits between calls, never joined
            t.start()
            started.append(t)
        return torch.softmax(args[0], -1)

    try:
        status, reason, check = verdict(session(fn))
    finally:
        stop.set()
        for t in started:
            t.join()
    assert (status, check) == ("cheat", "state")
    assert "thread count went from" in reason, reason


# ---------------------------------------------------------------- the verdict's allowances

def test_one_thread_pool_starting_once_is_allowed():
    once = {"thread_changes": [{"call": 0, "before": 2, "after": 3}]}
    assert verdict(once) is None
    twice = {"thread_changes": [{"call": 0, "before": 2, "after": 3}, {"call": 9, "before": 3, "after": 4}]}
    assert verdict(twice)[2] == "state"


def test_small_or_short_lived_growth_is_allowed():
    assert verdict({"heap_deltas": [LEAK_BYTES_PER_CALL] * 500}) is None  # at the allowance
    assert verdict({"heap_deltas": [1 << 20, 0, 0, 0, -(1 << 20)]}) is None  # one call's growth, given back
    assert verdict({"heap_deltas": [4096] * 3}) is None  # too few calls to tell
    assert verdict({"heap_deltas": [4096] * 40})[2] == "state"
    assert verdict(None) is None and verdict({}) is None
