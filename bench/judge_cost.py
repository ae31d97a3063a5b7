"""The judge's cost on a large task, on this machine: 6 input sets of a (8192, 4096) bf16 output
(the rms_norm row of BENCHMARKS.md), a correct candidate's outputs judged against a float64 oracle.

    python bench/judge_cost.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from kernforge.evaluate import judge as judge_module

SETS, SHAPE = 6, (8192, 4096)


def main() -> None:
    gen = torch.Generator().manual_seed(0)
    oracles = [[torch.randn(SHAPE, generator=gen, dtype=torch.float64)] for _ in range(SETS)]
    outs = [[o[0].to(torch.bfloat16)] for o in oracles]
    with tempfile.TemporaryDirectory() as tmp:
        oracle_path, outputs_path = Path(tmp) / "oracle.pt", Path(tmp) / "outputs.pt"
        torch.save({"oracles": oracles, "eager_errors": [[4e-3]] * SETS, "dtypes": ["torch.bfloat16"]},
                   oracle_path)
        torch.save({"labels": [f"set{i}" for i in range(SETS)], "sets": outs, "reused": outs[1],
                    "timed": outs[0]}, outputs_path)
        for attempt in ("first candidate (reads the oracle)", "second candidate", "third candidate"):
            start = time.perf_counter()
            verdict = judge_module.judge(outputs_path, oracle_path)
            print(f"{attempt}: {time.perf_counter() - start:.2f} s, {verdict['status']}")


if __name__ == "__main__":
    main()
