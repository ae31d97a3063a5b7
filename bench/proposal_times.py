"""How long the built-in proposer takes per proposal, on every conformance case of every family
and backend (tests/conformance_cases.py): a chain of STEPS moves, each expanding the last, with
every proposal so far as `tried`; the first and the slowest move, and the median.

    .venv/bin/python bench/proposal_times.py > bench/results/cpu/issue19/proposal_times.txt
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from conformance_cases import CASES  # noqa: E402
from family_check import make_task  # noqa: E402

from kernforge.propose.builtin import BuiltinProposer  # noqa: E402

STEPS = 30


def chain_times(task, backend: str) -> list[float]:
    proposer = BuiltinProposer(seed=0)
    tried, times, parent = [], [], None
    for _ in range(STEPS):
        started = time.perf_counter()
        proposal = proposer.next_move(task, backend, parent, tried)
        times.append((time.perf_counter() - started) * 1e3)
        if proposal is None:
            break
        tried.append(proposal)
        parent = proposal
    return times


def main() -> int:
    every: list[float] = []
    print(f"{'family':16s} {'backend':7s} {'cases':>5s} {'moves':>6s} {'median ms':>9s} {'max ms':>7s}")
    for family in sorted(CASES):
        for backend in ("cpu", "triton", "cuda"):
            times: list[float] = []
            cases = 0
            for op, args in CASES[family]:
                task = make_task(op, args)
                if BuiltinProposer().why_unsupported(task, backend):
                    continue
                cases += 1
                times += chain_times(task, backend)
            if times:
                every += times
                print(f"{family:16s} {backend:7s} {cases:5d} {len(times):6d} {statistics.median(times):9.2f} "
                      f"{max(times):7.1f}")
    print(f"all: {len(every)} moves, median {statistics.median(every):.2f} ms, "
          f"99th percentile {sorted(every)[int(0.99 * len(every))]:.1f} ms, max {max(every):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
