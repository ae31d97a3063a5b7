"""Honest timing of one callable: median with p20 and p80.

GPU: triton.testing.do_bench (CUDA events around each call, the L2 flushed
before each by writing a 256 MB buffer). CPU: wall time of each call after a
warm-up. Both return the same record, so that eager and candidate are compared
on equal terms.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# Repeats on a CPU: at least 10 calls and about 1 s of calls; medians over fewer
# than ~10 samples moved by >10% between identical runs on this 2-core machine.
CPU_MIN_RUNS, CPU_MAX_RUNS, CPU_TARGET_S = 10, 500, 1.0


@dataclass
class Timing:
    p20_ms: float
    p50_ms: float
    p80_ms: float
    runs: int
    method: str

    @property
    def spread(self) -> float:
        """(p80 - p20) / p50: the relative noise of this measurement."""
        return (self.p80_ms - self.p20_ms) / self.p50_ms if self.p50_ms > 0 else 0.0


def time_callable(fn: Callable[[], Any], device: torch.device) -> Timing:
    if device.type == "cuda":
        return _time_gpu(fn)
    return _time_cpu(fn)


def _time_gpu(fn: Callable[[], Any]) -> Timing:
    from triton.testing import do_bench

    p20, p50, p80 = do_bench(fn, warmup=25, rep=200, quantiles=[0.2, 0.5, 0.8])
    return Timing(p20_ms=p20, p50_ms=p50, p80_ms=p80, runs=-1, method="do_bench,l2-flush")


def _time_cpu(fn: Callable[[], Any]) -> Timing:
    for _ in range(3):  # warm-up: page faults on fresh outputs, OpenMP thread start
        fn()
    samples: list[float] = []
    deadline = time.perf_counter() + CPU_TARGET_S
    while len(samples) < CPU_MIN_RUNS or (time.perf_counter() < deadline and len(samples) < CPU_MAX_RUNS):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    samples.sort()
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))]
    return Timing(p20_ms=pick(0.2), p50_ms=pick(0.5), p80_ms=pick(0.8), runs=len(samples),
                  method="wall-clock")


def clearly_faster(candidate: Timing, baseline: Timing) -> bool:
    """Faster beyond the measured noise: the candidate's p80 under the baseline's p20."""
    return candidate.p80_ms < baseline.p20_ms


def clearly_faster_relative(a: Timing, a_eager: Timing, b: Timing, b_eager: Timing) -> bool:
    """a beats b beyond the noise, each measured against the eager timing of its own worker.

    Comparing times relative to eager cancels a machine that got busier between
    the two workers; the p80/p20 bounds keep the verdict outside the noise.
    """
    return a.p80_ms / a_eager.p50_ms < b.p20_ms / b_eager.p50_ms
