"""One judged call's compare of a large output on the CPU, whole against in slices
(evaluate/checks.py SLICE_PER_THREAD, times the intra-op threads): a (1, 128, 1024, 1024) bf16 output, the VAE decoder's largest group
norm, against its float64 oracle and bf16 bounds. The last rows pass the oracle's facts (its
finiteness and largest magnitude) as the judge does, worked out once per set.

    PYTHONPATH=src python bench/compare_slices.py
"""

from __future__ import annotations

import time

import torch

from kernforge.evaluate import checks

SHAPE = (1, 128, 1024, 1024)


def main() -> None:
    torch.manual_seed(0)
    oracle = torch.randn(SHAPE, dtype=torch.float64)
    out = oracle.to(torch.bfloat16)
    bound = (oracle.abs() * 1.6e-2 + 1e-3).to(torch.bfloat16)
    print(f"{torch.get_num_threads()} threads; output {SHAPE} bf16")
    print("| slice per thread (elements) | one compare, s (best of 3) | verdict, error |\n|---|---|---|")
    for size in (1 << 40, 1 << 14, 1 << 15, 1 << 16, 1 << 17, 1 << 19, 1 << 21):
        checks.SLICE_PER_THREAD = size
        best, result = float("inf"), None
        for _ in range(3):
            start = time.perf_counter()
            result = checks.compare([out], [oracle], [bound], [torch.bfloat16])
            best = min(best, time.perf_counter() - start)
        label = "whole" if size >= oracle.numel() else str(size)
        print(f"| {label} | {best:.2f} | {result[0]}, {result[1][0]:.3g} |")
    facts = [checks.oracle_facts(oracle)]
    for size in (1 << 40, 1 << 15):
        checks.SLICE_PER_THREAD = size
        best, result = float("inf"), None
        for _ in range(3):
            start = time.perf_counter()
            result = checks.compare([out], [oracle], [bound], [torch.bfloat16], facts=facts)
            best = min(best, time.perf_counter() - start)
        label = "whole" if size >= oracle.numel() else str(size)
        print(f"| {label}, the oracle's facts known | {best:.2f} | {result[0]}, {result[1][0]:.3g} |")


if __name__ == "__main__":
    main()
