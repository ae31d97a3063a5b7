"""How the L2 flush changes GPU timings: triton's do_bench (flush by zeroing 256 MB)
against kernforge's timing (flush by reading 256 MB), three times each, on a few ops.

    PYTHONPATH=src python3 bench/timing_flush.py

Prints p20/p50/p80 per method and repeat: the spread (p80-p20)/p50 and how far the
medians of the repeats wander are what the flush decides.
"""

from __future__ import annotations

import functools
import sys

import torch
from triton.testing import do_bench

from kernforge.harness import timing
from kernforge.harness.session import time_callable


def ops() -> list[tuple[str, object]]:
    soft = torch.randn(8, 262144, device="cuda")
    small = torch.randn(4096, 256, device="cuda")
    rms_x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    rms_w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    pool = torch.randn(256, 2048, 7, 7, device="cuda")
    return [
        ("softmax (8,262144) f32", functools.partial(torch.softmax, soft, -1)),
        ("softmax (4096,256) f32", functools.partial(torch.softmax, small, -1)),
        ("rms_norm (8192,4096) bf16", functools.partial(torch.ops.aten._fused_rms_norm, rms_x, [4096], rms_w, 1e-6)),
        ("mean (256,2048,7,7) f32", functools.partial(torch.mean, pool, (2, 3), True)),
    ]


def main() -> int:
    timing.RUNWAY_CYCLES = 0  # the flushes alone, as when bench/results/h200/timing_flush.md was measured
    print("| op | method | repeat | p20 ms | p50 ms | p80 ms | spread |\n|---|---|---|---|---|---|---|")
    for name, fn in ops():
        for repeat in range(3):
            p20, p50, p80 = do_bench(fn, warmup=25, rep=200, quantiles=[0.2, 0.5, 0.8])
            print(f"| {name} | do_bench, zeroing flush | {repeat} | {p20:.4f} | {p50:.4f} | {p80:.4f} | "
                  f"{(p80 - p20) / p50:.2f} |", flush=True)
            t = time_callable(fn, torch.device("cuda"))
            print(f"| {name} | kernforge, reading flush | {repeat} | {t.p20_ms:.4f} | {t.p50_ms:.4f} | "
                  f"{t.p80_ms:.4f} | {t.spread:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
