"""One judged call's compare of a large output on the CPU, whole against in slices
(evaluate/checks.py SLICE_PER_THREAD, times the intra-op threads): a (1, 128, 1024, 1024) bf16
output, the VAE decoder's largest group norm, against its oracle as the judge keeps it (float32
for a 16-bit output, checks.oracle_dtype) with the oracle's facts known, and bf16 bounds. Each
size is timed from the main thread and from a thread of a pool, as the search judges (its
candidates' evaluations run in threads, where every OpenMP parallel region costs more: ~120 us
against ~10 for a 64K-element op on a 2-core x86 CPU).

    PYTHONPATH=src python bench/compare_slices.py
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import torch

from kernforge.evaluate import checks

SHAPE = (1, 128, 1024, 1024)
SIZES = (1 << 40, 1 << 15, 1 << 17, 1 << 19, 1 << 20, 1 << 21)


def main() -> None:
    torch.manual_seed(0)
    oracle = torch.randn(SHAPE, dtype=torch.float64)
    out = oracle.to(torch.bfloat16)
    bound = (oracle.abs() * 1.6e-2 + 1e-3).to(torch.bfloat16)
    oracle = oracle.to(checks.oracle_dtype(torch.bfloat16))
    facts = [checks.oracle_facts(oracle)]

    def best_of_3() -> tuple[float, tuple]:
        best, result = float("inf"), None
        for _ in range(3):
            start = time.perf_counter()
            result = checks.compare([out], [oracle], [bound], [torch.bfloat16], facts=facts)
            best = min(best, time.perf_counter() - start)
        return best, result

    print(f"{torch.get_num_threads()} threads; output {SHAPE} bf16, oracle {oracle.dtype}, its facts known")
    print("| slice per thread (elements) | main thread, s (best of 3) | a pool's thread, s | verdict, error |")
    print("|---|---|---|---|")
    with ThreadPoolExecutor(1) as pool:
        for size in SIZES:
            checks.SLICE_PER_THREAD = size
            main_s, result = best_of_3()
            thread_s, _ = pool.submit(best_of_3).result()
            label = "whole" if size >= oracle.numel() else str(size)
            print(f"| {label} | {main_s:.2f} | {thread_s:.2f} | {result[0]}, {result[1][0]:.3g} |")


if __name__ == "__main__":
    main()
