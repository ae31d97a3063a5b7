"""Candidates per minute against the number of GPUs (issue 6), on a machine with several.

    PYTHONPATH=src python3 bench/gpu_scaling.py --gpus 0 0,1 0,1,2,3 --iterations 48 --out DIR

One search per GPU set, on the same op (a row of bench/seed_ops.py), MCTS and the
builtin proposer, --parallel candidates in flight per GPU. The rate is counted from
the first candidate's end to the last one's, so capture and baselines are left out; "mean running"
is how many candidates were in workers on average over the search (the slots kept busy).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def rate(run_dir: Path) -> tuple[int, float, float]:
    """Candidates, candidates per minute (first end to last end) and how many were running
    on average from the first start to the last end (the workers kept busy)."""
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    ends = {e["node"]: e["time"] for e in events if e["kind"] == "node"}
    starts = {e["node"]: e["time"] for e in events if e["kind"] == "node_start"}
    times = sorted(ends.values())
    span = times[-1] - times[0] if len(times) > 1 else float("nan")
    per_minute = (len(times) - 1) / span * 60 if len(times) > 1 and span > 0 else float("nan")
    timed = [n for n in ends if n in starts]
    busy = float("nan")
    if timed:
        window = max(ends[n] for n in timed) - min(starts[n] for n in timed)
        busy = sum(ends[n] - starts[n] for n in timed) / window if window > 0 else float("nan")
    return len(times), per_minute, busy


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", nargs="+", default=["0", "0,1"])
    parser.add_argument("--row", default="softmax_f32_4096x256")
    parser.add_argument("--iterations", type=int, default=48)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for gpus in args.gpus:
        runs = Path(tempfile.mkdtemp(prefix="kf-scaling-"))
        proc = subprocess.run([sys.executable, "-m", "kernforge", "optimize", f"bench.seed_ops:{args.row}",
                               "--backend", "triton", "--iterations", str(args.iterations), "--top-k", "1",
                               "--compile", "none", "--gpus", gpus, "--parallel", str(args.parallel),
                               "--runs-dir", str(runs), "--json"], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            rows.append({"gpus": gpus, "error": proc.stderr.strip().splitlines()[-1:]})
            continue
        data = json.loads(proc.stdout)
        count, per_minute, busy = rate(Path(data["run_dir"]))
        task = data["tasks"][0]
        rows.append({"gpus": gpus, "n_gpus": len(gpus.split(",")), "candidates": count,
                     "candidates_per_minute": per_minute, "mean_running": busy, "status_counts": task["status_counts"],
                     "best_speedup_vs_eager": task["best_speedup_vs_eager"], "wall_s": data["wall_s"]})
        print(json.dumps(rows[-1]), flush=True)
    (args.out / "gpu_scaling.json").write_text(json.dumps({"row": args.row, "parallel_per_gpu": args.parallel,
                                                           "rows": rows}, indent=1))
    print("\n| GPUs | candidates | candidates per minute | mean running | statuses |\n|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['gpus']} | error: {r['error']} | | | |")
        else:
            print(f"| {r['n_gpus']} | {r['candidates']} | {r['candidates_per_minute']:.1f} | {r['mean_running']:.1f} "
                  f"| {r['status_counts']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
