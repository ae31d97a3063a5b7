"""One evaluation's cost, before and after a change to the per-call path: the softmax task of
tests/models/tiny_softmax.py, honest candidates of tests/redteam/honest, each evaluated ROUNDS
times through evaluate_candidate; prints the median wall time and the candidate session's share.

    PYTHONPATH=DIR python bench/guard_cost.py --src DIR [--rounds N]

Run it with each source tree (--src picks the search process's kernforge; PYTHONPATH the forked
workers', whose forkserver does not see run_current's sys.path), alternating, on the same machine; the wall times are what the search
pays per candidate.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "redteam"))
import run_current  # noqa: E402

CASES = ["honest/c-plain-reference.c", "honest/c-openmp.c", "honest/py-strided-input.py"]


def main() -> None:
    from kernforge.evaluate import evaluate_candidate

    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 5
    work = Path(tempfile.mkdtemp(prefix="guard-cost-"))
    task_path, reference_path = run_current.setup(work)
    walls: dict[str, list[float]] = {c: [] for c in CASES}
    phases: dict[str, list[dict[str, float]]] = {c: [] for c in CASES}
    for r in range(rounds):
        for case in CASES:
            path = run_current.HERE / case
            job = work / f"{path.stem}-{r}"
            job.mkdir()
            source = job / f"candidate{path.suffix}"
            source.write_text(path.read_text())
            started = time.perf_counter()
            result = evaluate_candidate(task_path, reference_path, source, "cpu" if path.suffix == ".c" else "triton",
                                        "cpu", job / "job", timeout_s=120)
            walls[case].append(time.perf_counter() - started)
            phases[case].append(result.phases)
            assert result.status == "ok", (case, result.status, result.reason)
    import kernforge
    print(f"kernforge from {Path(kernforge.__file__).parent}, {rounds} rounds")
    for case in CASES:
        steps = {k: statistics.median(p.get(k, 0.0) for p in phases[case]) for k in phases[case][0]}
        print(f"{case:32s} wall median {statistics.median(walls[case]):.3f} s (min {min(walls[case]):.3f}); "
              + ", ".join(f"{k} {v:.3f}" for k, v in steps.items()))


if __name__ == "__main__":
    main()
