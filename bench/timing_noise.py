"""Does a busy host spread a multi-launch kernel's GPU timing, and does the runway help?

    PYTHONPATH=src:. python3 bench/timing_noise.py [--runways 0 100000 1000000]

The split softmax for (8, 262144) f32 (two launches) and eager's softmax (one), timed by
kernforge.harness.timing with and without the runway (the GPU spinning ~0.5 ms after the L2
flush, so the host has time to launch the call), on a quiet host and on one where every core
runs a busy process (as when other workers build and check). Prints p20/p50/p80 per case, and the
timing's wall (the runway is most of a small op's device time: 500 calls of ~0.5 ms each).
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from family_check import family_for, make_task, tensor
from probe_templates import hardware, load

from kernforge.harness import session


def split_softmax():
    """The softmax family's starting point for 8 rows of 256K: too few rows to fill the SMs, so
    each row is split across programs (a partials kernel, then a combining one)."""
    args = [tensor([8, 262144]), -1, False]
    family, facts = family_for(make_task("aten::_softmax.default", args))
    params = family.start(facts, "triton", hardware())
    assert params.get("variant") == "split_row", f"the softmax family starts elsewhere now: {params}"
    return load(family.render(facts, "triton", params), "split_softmax").kf_forward, params


def burn(stop) -> None:
    x = 0
    while not stop.is_set():
        x = (x * 31 + 7) % 1000003


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runways", type=int, nargs="+", default=[0, session.RUNWAY_CYCLES],
                        help="GPU cycles of spin after the flush, one timing each")
    runways = parser.parse_args().runways
    x = torch.randn(8, 262144, device="cuda")
    candidate, params = split_softmax()
    print(f"split softmax params: {params}")
    cases = [("split softmax", functools.partial(candidate, x, -1, False)),
             ("eager softmax", functools.partial(torch.softmax, x, -1))]
    print("| kernel | host | runway | p20 ms | p50 ms | p80 ms | spread | wall s |\n|---|---|---|---|---|---|---|---|")
    default_runway = session.RUNWAY_CYCLES
    for host in ("quiet", "busy"):
        stop = multiprocessing.Event()
        burners = []
        if host == "busy":
            burners = [multiprocessing.Process(target=burn, args=(stop,)) for _ in range(os.cpu_count() or 1)]
            for b in burners:
                b.start()
        try:
            for name, fn in cases:
                for runway in runways:
                    session.RUNWAY_CYCLES = runway
                    for _ in range(2):
                        start = time.perf_counter()
                        t = session.time_callable(fn, torch.device("cuda"))
                        wall = time.perf_counter() - start
                        print(f"| {name} | {host} | {runway} | {t.p20_ms:.4f} | {t.p50_ms:.4f} | {t.p80_ms:.4f} "
                              f"| {t.spread:.2f} | {wall:.2f} |", flush=True)
        finally:
            stop.set()
            for b in burners:
                b.join()
    session.RUNWAY_CYCLES = default_runway
    return 0


if __name__ == "__main__":
    sys.exit(main())
