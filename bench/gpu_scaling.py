"""Candidates per minute against the number of GPUs (issue 6) and the executor (issue 34).

    PYTHONPATH=src python3 bench/gpu_scaling.py --gpus 0 0,1 0,1,2,3 --iterations 48 --out DIR
    PYTHONPATH=src python3 bench/gpu_scaling.py --gpus 0 --executors local ray --parallel 4 8 --out DIR

One search per GPU set and executor, on the same op (a row of bench/seed_ops.py), MCTS and the
builtin proposer, --parallel candidates in flight per GPU. The rate is counted from
the first candidate's end to the last one's, so capture and baselines are left out; "mean running"
is how many candidates were in workers on average over the search (the slots kept busy), and
"seconds a candidate" its mean time from proposal to result. Where two executors ran, the
candidates both evaluated (the same source) are compared by verdict.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path


# The worker's phases that hold its device's lock (evaluate/worker.py run_candidate): eager timed,
# the candidate's session, eager timed again; the build and first call (Triton's compile) do not.
LOCKED_PHASES = ("eager_timing_s", "session_s", "timing_s")


def read_events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def rate(events: list[dict]) -> tuple[int, float, float]:
    """Candidates, candidates per minute (first end to last end) and how many were running
    on average from the first start to the last end (the workers kept busy)."""
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


def candidate_seconds(events: list[dict]) -> float:
    """Mean seconds from a candidate's proposal to its result (the executor's overhead is in it)."""
    ends = {e["node"]: e["time"] for e in events if e["kind"] == "node"}
    spans = [ends[e["node"]] - e["time"] for e in events if e["kind"] == "node_start" and e["node"] in ends]
    return sum(spans) / len(spans) if spans else float("nan")


def mean_phases(run_dir: Path) -> dict[str, float]:
    """Each phase's mean seconds over the evaluated candidates (result.json's phases: the worker's
    eager timing, build, first call, session and eager-after timing, and the judge here), and
    their mean wall: where a candidate's seconds go, and how many of them hold the device lock."""
    totals: dict[str, float] = {}
    count = 0
    for result in run_dir.glob("tasks/*/nodes/*/result.json"):
        data = json.loads(result.read_text())
        count += 1
        for name, seconds in {**(data.get("phases") or {}), "wall_s": data.get("wall_s") or 0.0}.items():
            totals[name] = totals.get(name, 0.0) + seconds
    return {name: round(total / count, 3) for name, total in totals.items()} if count else {}


def verdicts(run_dir: Path) -> dict[str, str]:
    """Each evaluated candidate's status, keyed by its source's hash."""
    found = {}
    for source in run_dir.glob("tasks/*/nodes/*/candidate.*"):
        result = source.parent / "result.json"
        if result.exists():
            found[hashlib.sha256(source.read_bytes()).hexdigest()] = json.loads(result.read_text())["status"]
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", nargs="+", default=["0", "0,1"])
    parser.add_argument("--row", default="softmax_f32_4096x256")
    parser.add_argument("--iterations", type=int, default=48)
    parser.add_argument("--parallel", type=int, nargs="+", default=[4], help="candidates in flight per GPU; "
                        "several values run a search each")
    parser.add_argument("--executors", nargs="+", default=["local"])
    parser.add_argument("--backend", default="triton", help="cpu checks the script here (--gpus is then ignored)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows, seen = [], {}
    for gpus in args.gpus:
        for executor in args.executors:
            for parallel in args.parallel:
                row, run_dir = search(args, gpus, executor, parallel)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if run_dir is not None and parallel == args.parallel[0]:
                    seen[gpus, executor] = verdicts(run_dir)
    agreement = compare_verdicts(seen)
    (args.out / "gpu_scaling.json").write_text(json.dumps({"row": args.row,
                                                           "rows": rows, "verdicts": agreement}, indent=1))
    print("\n| GPUs | executor | in flight a GPU | candidates | candidates per minute | mean running | seconds a candidate | statuses |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['gpus']} | {r['executor']} | {r['parallel']} | error: {r['error']} | | | | |")
        else:
            print(f"| {r['n_gpus']} | {r['executor']} | {r['parallel']} | {r['candidates']} | {r['candidates_per_minute']:.1f} "
                  f"| {r['mean_running']:.1f} | {r['seconds_a_candidate']:.2f} | {r['status_counts']} |")
    for r in rows:
        if r.get("mean_phases"):
            print(f"{r['n_gpus']} GPU(s), {r['executor']}: a candidate's mean seconds by phase {r['mean_phases']}")
            locked = sum(r["mean_phases"].get(k, 0.0) for k in LOCKED_PHASES)
            if locked > 0:
                # with several in flight these phases include the waits for the lock: the bound holds
                # only for a search of one candidate in flight a GPU
                waits = "" if r["parallel"] == 1 else ", waits for the lock included"
                print(f"  under the device lock {locked:.2f} s a candidate ({' + '.join(LOCKED_PHASES)}{waits}): "
                      f"at most {60 / locked * r['n_gpus']:.1f} candidates a minute however many are in flight")
    for line in agreement:
        print(line)
    return 0


def search(args: argparse.Namespace, gpus: str, executor: str, parallel: int) -> tuple[dict, Path | None]:
    """One search on the row; its figures, and its run folder where it finished."""
    runs = Path(tempfile.mkdtemp(prefix="kf-scaling-"))
    proc = subprocess.run([sys.executable, "-m", "kernforge", "optimize", f"bench.seed_ops:{args.row}",
                           "--backend", args.backend, "--iterations", str(args.iterations), "--top-k", "1",
                           "--compile", "none", "--gpus", gpus, "--parallel", str(parallel),
                           "--executor", executor, "--runs-dir", str(runs), "--json"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return {"gpus": gpus, "executor": executor, "parallel": parallel,
                "error": proc.stderr.strip().splitlines()[-1:]}, None
    data = json.loads(proc.stdout)
    run_dir = Path(data["run_dir"])
    events = read_events(run_dir)
    count, per_minute, busy = rate(events)
    task = data["tasks"][0]
    return {"gpus": gpus, "n_gpus": len(gpus.split(",")), "executor": executor, "parallel": parallel, "candidates": count,
            "candidates_per_minute": per_minute, "mean_running": busy,
            "seconds_a_candidate": candidate_seconds(events), "mean_phases": mean_phases(run_dir), "status_counts": task["status_counts"],
            "best_speedup_vs_eager": task["best_speedup_vs_eager"], "wall_s": data["wall_s"]}, run_dir


def compare_verdicts(seen: dict[tuple[str, str], dict[str, str]]) -> list[str]:
    """For each GPU set searched by several executors: how many candidates both evaluated, and
    the ones whose verdicts differ."""
    lines = []
    for gpus in {g for g, _ in seen}:
        runs = [(e, v) for (g, e), v in seen.items() if g == gpus]
        for (first, a), (other, b) in zip(runs, runs[1:]):
            shared = a.keys() & b.keys()
            differ = sorted(f"{a[h]} against {b[h]}" for h in shared if a[h] != b[h])
            lines.append(f"GPUs {gpus}: {first} and {other} evaluated {len(shared)} candidates alike, "
                         f"{len(differ)} verdicts differ{': ' + '; '.join(differ) if differ else ''}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
