"""One evaluation's cost on this machine: the tiny softmax task (tests/models/tiny_softmax.py), an
honest C kernel and an honest Triton one (interpreter), each evaluated REPEATS times after one
baseline; prints the input sets judged, the median wall time of evaluate_candidate, and the
median over the evaluations measured once (a busy machine makes evaluate_candidate time a
candidate again, which doubles its wall time: on a shared 2-core machine that noise was
larger than anything compared).

    PYTHONPATH=src .venv/bin/python bench/eval_cost.py   (KF_REPEATS=N: N evaluations a case)

With KERNFORGE_FORK_WORKERS=0 the workers are this process's own children, and the CPU time of
each evaluation (this process's and its workers', user + sys) is printed too: steadier than
the wall time where other work shares the cores.
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "redteam"))
from run_current import setup  # noqa: E402

REPEATS = int(os.environ.get("KF_REPEATS", "5"))
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
            walls, once, cpu = [], [], []
            for k in range(REPEATS):
                start, cpu_start = time.perf_counter(), _cpu_s()
                result = evaluate_candidate(task_path, reference_path, ROOT / "tests" / "redteam" / file, backend,
                                            "cpu", work / f"job-{name}-{k}", timeout_s=120)
                walls.append(time.perf_counter() - start)
                cpu.append(_cpu_s() - cpu_start)
                assert result.status == "ok", result.reason
                if not result.retimed:
                    once.append(walls[-1])
            print(f"{name}: median {statistics.median(walls):.2f} s over {REPEATS} "
                  f"({', '.join(f'{w:.2f}' for w in walls)}); measured once: {len(once)}, median "
                  f"{statistics.median(once) if once else float('nan'):.2f} s ({', '.join(f'{w:.2f}' for w in once)}); CPU time: median {statistics.median(cpu):.2f} s "
                  f"({', '.join(f'{c:.2f}' for c in cpu)})")


def _cpu_s() -> float:
    """User + sys seconds of this process and of its children that have exited."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


if __name__ == "__main__":
    main()
