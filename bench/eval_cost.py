"""One evaluation's cost on this machine: the tiny softmax task (tests/models/tiny_softmax.py), an
honest C kernel and an honest Triton one (interpreter), each evaluated REPEATS times after one
baseline; prints the input sets judged and the median wall time of evaluate_candidate.

    PYTHONPATH=src .venv/bin/python bench/eval_cost.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "redteam"))
from run_current import setup  # noqa: E402

REPEATS = 5
CASES = {"c-plain-reference": ("honest/c-plain-reference.c", "cpu"),
         "py-exp2-subtract-first": ("honest/py-exp2-subtract-first.py", "triton")}


def main() -> None:
    from kernforge.evaluate import evaluate_candidate

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        task_path, reference_path = setup(work)
        print(f"capture + baseline: {time.perf_counter() - started:.1f} s")
        labels = torch.load(reference_path, weights_only=True, mmap=True)["labels"]
        print(f"input sets judged: {len(labels)}: {', '.join(labels)}")
        for name, (file, backend) in CASES.items():
            walls = []
            for k in range(REPEATS):
                start = time.perf_counter()
                result = evaluate_candidate(task_path, reference_path, ROOT / "tests" / "redteam" / file, backend,
                                            "cpu", work / f"job-{name}-{k}", timeout_s=120)
                walls.append(time.perf_counter() - start)
                assert result.status == "ok", result.reason
            print(f"{name}: median {statistics.median(walls):.2f} s over {REPEATS} "
                  f"({', '.join(f'{w:.2f}' for w in walls)})")


if __name__ == "__main__":
    main()
