"""The harness's own cost a call, with the outputs' prefill (harness/prefill.py) or, on a tree
before it, the NaN fill: one session of a native-like kernel that copies its input into the
output (so the call itself costs next to nothing), SESSIONS times; prints the median host
time a call. Run it on each tree to compare:

    PYTHONPATH=src .venv/bin/python bench/prefill_cost.py [rows cols]
"""

from __future__ import annotations

import statistics
import sys

import torch

from kernforge.harness.session import Plan, make_harness, output_metas
from kernforge.evaluate.worker import _candidate_call

SESSIONS, CALLS = 15, 500
CPU = torch.device("cpu")


class Copies:
    """A native kernel's interface (outputs made by the harness) over a copy."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def new_outputs(self, poison: bool = True) -> list[torch.Tensor]:
        return [torch.empty(self.shape)]

    def run(self, outputs, args, kwargs):
        outputs[0].copy_(args[0])
        return outputs[0]


def prefill_for(metas):
    try:
        from kernforge.harness.prefill import Prefill
    except ImportError:  # the tree before issue 33's prefill: the harness takes the metas
        return metas
    return Prefill(metas)


def main(rows: int, cols: int) -> None:
    shape = (rows, cols)
    gen = torch.Generator().manual_seed(0)
    sets = [([torch.randn(shape, generator=gen)], {}) for _ in range(4)]
    metas = output_metas([{"shape": list(shape), "stride": [cols, 1], "dtype": "torch.float32"}])
    fn, prepare = _candidate_call(Copies(shape))
    harness = make_harness(CPU)
    per_call_us = []
    for seed in range(SESSIONS):
        plan = Plan(sets=sets, timing=[0, 1, 2, 3], checks=[0, 1, 2, 3], calls=CALLS, judged_timed=3)
        result = harness(fn, plan, prepare, prefill_for(metas), seed, name="prefill-cost")
        per_call_us.append(result.host_s / result.calls * 1e6)
    print(f"{rows}x{cols} float32: harness host time a call, median of {SESSIONS} sessions of {CALLS}: "
          f"{statistics.median(per_call_us):.1f} us (p20 {sorted(per_call_us)[3]:.1f}, "
          f"p80 {sorted(per_call_us)[11]:.1f})")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3])) if len(sys.argv) > 2 else main(80, 40)
