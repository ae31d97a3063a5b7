"""Plain forward passes of a loaded model: the warm-up before anything is timed, their median
wall time, the device time of one under the profiler (kept quiet), which the capture and the
compiled profile both take."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from kernforge.models import LoadedModel, run_forward

# Warm-up, in seconds of forward passes: in a fresh process on a 2-core VM every 2-thread op
# took ~8 ms for the first 0.55 s after the first parallel region, then 3 us (a 40 us forward
# measured at 32 ms); the other kernforge processes see the same from their start.
WARMUP_S = 1.0


def kernel_total_us(loaded: LoadedModel) -> float:
    """All device time of one plain forward pass, as the profiler sees it with nothing recorded."""
    with quiet_native_stderr(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
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


def warm_up(loaded: LoadedModel, least_s: float = WARMUP_S, most: int = 500) -> None:
    """Forward passes for least_s (one at least): lazy init, allocator growth, library autotuning,
    and on a CPU the OpenMP threads' start."""
    started = time.perf_counter()
    for _ in range(most):
        run_forward(loaded)
        if time.perf_counter() - started >= least_s:
            break


def median_forward_ms(loaded: LoadedModel, runs: int = 5, least_s: float = 0.3, most: int = 51) -> float:
    """The median of at least `runs` plain passes, more (up to `most`) until least_s is spent: a
    40 us forward's median of 5 on a loaded 2-core machine swung between 0.04 and 32 ms."""
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < runs or (len(samples) < most and time.perf_counter() - started < least_s):
        if loaded.device.type == "cuda":
            torch.cuda.synchronize(loaded.device)
        start = time.perf_counter()
        with torch.no_grad():
            loaded.module(*loaded.inputs)
        if loaded.device.type == "cuda":
            torch.cuda.synchronize(loaded.device)
        samples.append((time.perf_counter() - start) * 1e3)
    return median(samples)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@contextlib.contextmanager
def quiet_native_stderr():
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
