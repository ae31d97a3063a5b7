"""BENCHMARKS.md's operator table with a kernforge column: one `kernforge optimize` per row.

    PYTHONPATH=src python3 bench/search_bench.py --strategy mcts --iterations 50 --out DIR

Per row: the op kernforge searched, eager, torch.compile (default and
max-autotune-no-cudagraphs, timed in the task's baseline worker), the best kernel
found, the floor (bytes that must move over the copy bandwidth measured at the
start of this run, never under 2 us), the iterations it took to come within 95%
of the best speedup, and the search's wall time. Everything is written to
DIR/search_<strategy>.json as it goes; the table is printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench.seed_ops, from anywhere

from bench.seed_ops import ROWS
from kernforge.records import ResultRow
from kernforge.store import RunStore

LAUNCH_FLOOR_MS = 0.002
L2_BYTES = 50 * 2**20  # H100/H200


def copy_bandwidth() -> float:
    """Bytes per second of a 2 GiB device-to-device copy (read + write), median of do_bench."""
    import torch
    from triton.testing import do_bench

    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    return 2 * n / (ms * 1e-3)


def run_row(name: str, args: argparse.Namespace, runs_dir: Path, gpu: int | None = None) -> dict:
    started = time.perf_counter()
    cmd = [sys.executable, "-m", "kernforge", "optimize", f"bench.seed_ops:{name}", "--backend", args.backend,
           "--iterations", str(args.iterations), "--top-k", "1", "--strategy", args.strategy,
           "--compile", args.compile, "--runs-dir", str(runs_dir), "--json", "--timeout", "120"]
    if args.parallel:
        cmd += ["--parallel", str(args.parallel)]
    # A lane's whole process sees only its GPU: its capture and baselines too, not only its
    # candidates (--gpus would pin those alone, and the capture would run on GPU 0 beside
    # another lane's timings).
    env = os.environ | {"CUDA_VISIBLE_DEVICES": str(gpu)} if gpu is not None else None
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env,
                          cwd=Path(__file__).resolve().parent.parent)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        return {"row": name, "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:], "wall_s": wall}
    data = json.loads(proc.stdout)
    if not data["tasks"]:
        return {"row": name, "error": f"nothing searched: {data['skipped'][:2]}", "wall_s": wall}
    task = data["tasks"][0]
    run_dir = Path(data["run_dir"])
    baseline = json.loads((run_dir / "tasks" / task["task"] / "baseline.json").read_text())
    compiled = {mode: (entry.get("timing") or {}).get("p50_ms") for mode, entry in baseline["compiled"].items()}
    rows = RunStore(run_dir).results()
    keep_flat(run_dir, task["task"], args.out / f"{args.strategy}_{args.backend}_{name}")
    start = rows[0] if rows else None
    return {"row": name, "backend": args.backend, "op": task["op"], "shape": task["shape"], "dtype": task["dtype"],
            "eager_ms": task["eager_p50_ms"], "best_ms": task["best_p50_ms"],
            "speedup_vs_eager": task["best_speedup_vs_eager"], "verdict": task["verdict"],
            "compile_ms": compiled.get("default"),
            "max_autotune_ms": compiled.get("max-autotune-no-cudagraphs"),
            "compile_errors": {m: e.get("error") for m, e in baseline["compiled"].items() if e.get("error")},
            "candidates": task["candidates"], "status_counts": task["status_counts"],
            # The starting point's own speedup (its first timing, not a finalist's): best / start is
            # what the search added to the rule's choice.
            "start_status": start.status if start else None, "start_ms": start.p50_ms if start else None,
            "start_speedup_vs_eager": start.speedup_vs_eager if start and start.status == "ok" else None,
            "iterations_to_95": iterations_to_95(rows), "finalists": task.get("finalists"),
            "eval_s": [r.eval_s for r in rows if r.eval_s],
            "search_wall_s": data["wall_s"], "wall_s": wall, "best_node": task["best_node"],
            "run_dir": str(run_dir)}


def keep_flat(run_dir: Path, task_id: str, dest: Path) -> None:
    """What explains a row's figures, two levels deep (the device returns no deeper folders):
    results.tsv, summary, baseline, and one line per node with its phases and verdict."""
    dest.mkdir(parents=True, exist_ok=True)
    task_dir = run_dir / "tasks" / task_id
    for src, name in [(run_dir / "results.tsv", "results.tsv"), (run_dir / "summary.json", "summary.json"),
                      (task_dir / "baseline.json", "baseline.json")]:
        if src.is_file():
            (dest / name).write_bytes(src.read_bytes())
    with open(dest / "nodes.jsonl", "w") as f:
        for node_dir in sorted((task_dir / "nodes").iterdir()):
            result = node_dir / "result.json"
            proposal = node_dir / "proposal.json"
            if result.is_file():
                r = json.loads(result.read_text())
                f.write(json.dumps({"node": node_dir.name, "status": r["status"], "reason": r["reason"][:500],
                                    "wall_s": r["wall_s"], "phases": r.get("phases"),
                                    "speedup_vs_eager": r.get("speedup_vs_eager"),
                                    "proposal": json.loads(proposal.read_text()) if proposal.is_file() else None})
                        + "\n")


def iterations_to_95(rows: list[ResultRow]) -> int | None:
    """1-based index of the first candidate within 95% of the best speedup (over eager) found."""
    speedups = [(r.speedup_vs_eager or 0.0) if r.status == "ok" else 0.0 for r in rows]
    best = max(speedups, default=0.0)
    if best <= 0:
        return None
    return next(i + 1 for i, s in enumerate(speedups) if s >= 0.95 * best)


def floor_ms(name: str, bandwidth: float) -> float:
    return max(LAUNCH_FLOOR_MS, ROWS[name][1] / bandwidth * 1e3)


def table(results: list[dict], bandwidth: float) -> str:
    lines = [("| op and shape | backend | floor | eager | compile | max-autotune | start | kernforge | vs eager "
              "| vs best compile | vs floor | gain over start | > L2 | iters to 95% | candidates (ok) | search s |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        label = ROWS[r["row"]][0]
        if r.get("error"):
            lines.append(f"| {label} | {r.get('backend', '')} | | | | | | error: {r['error']} | | | | | | | | |")
            continue
        floor = floor_ms(r["row"], bandwidth)
        best = r["best_ms"]
        compiles = [c for c in (r["compile_ms"], r["max_autotune_ms"]) if c]
        start = r.get("start_ms") if r.get("start_status") == "ok" else None
        lines.append("| " + " | ".join([
            label, r.get("backend", "triton"), f"{floor:.4f}", _ms(r["eager_ms"]), _ms(r["compile_ms"]),
            _ms(r["max_autotune_ms"]), _ms(start) if start else (r.get("start_status") or "-"),
            _ms(best), _x(r["eager_ms"], best), _x(min(compiles), best) if compiles else "-",
            f"{best / floor:.2f}x" if best else "-", _x(start, best) if start and best else "-", "yes" if ROWS[r["row"]][1] > L2_BYTES else "no",
            str(r["iterations_to_95"] or "-"), f"{r['candidates']} ({r['status_counts'].get('ok', 0)})",
            f"{r['search_wall_s']:.0f}"]) + " |")
    return "\n".join(lines)


def _ms(v: float | None) -> str:
    return f"{v:.4f}" if v else "-"


def _x(base: float | None, new: float | None) -> str:
    return f"{base / new:.2f}x" if base and new else "-"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", default="mcts")
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--compile", default="max-autotune")
    parser.add_argument("--backend", default="triton", choices=["triton", "cuda"])
    parser.add_argument("--parallel", type=int, default=0)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--budget-s", type=float, default=1e9, help="stop starting rows after this long")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--lanes", type=int, default=1,
                        help="rows searched side by side, lane k on GPU k (a machine with several GPUs)")
    parser.add_argument("--append", action="store_true",
                        help="add these rows to an existing search_<strategy>.json instead of starting one")
    args = parser.parse_args()
    import torch
    import triton

    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    bandwidth = copy_bandwidth()
    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
              "strategy": args.strategy, "iterations": args.iterations, "proposer": "builtin",
              "compile": args.compile, "copy_bandwidth_tb_s": bandwidth / 1e12, "rows": []}
    path = args.out / f"search_{args.strategy}.json"
    if args.append and path.is_file():  # rows run again replace their old entry
        report["rows"] = [r for r in json.loads(path.read_text())["rows"]
                          if (r["row"], r.get("backend", "triton")) not in {(n, args.backend) for n in args.rows.split(",")}]
    names = args.rows.split(",")
    previous = list(report["rows"])  # kept rows of an --append, first in the report
    done: dict[str, dict] = {}
    lock = threading.Lock()

    def lane(k: int) -> None:
        # lane k takes rows k, k + lanes, ...: list the longest rows first to balance the lanes
        for name in names[k::args.lanes]:
            if time.perf_counter() - started > args.budget_s:
                result = {"row": name, "error": "not run: the time budget was spent"}
            else:
                runs = Path(tempfile.gettempdir()) / "kf-bench-runs" / args.strategy / f"lane{k}"
                result = run_row(name, args, runs, gpu=k if args.lanes > 1 else None)
                result["floor_ms"] = floor_ms(name, bandwidth)
                result["gpu"] = k if args.lanes > 1 else None
            with lock:
                done[name] = result
                report["rows"] = previous + [done[n] for n in names if n in done]
                path.write_text(json.dumps(report, indent=1))
                print(json.dumps({key: result.get(key) for key in ("row", "op", "eager_ms", "best_ms",
                                                               "speedup_vs_eager", "compile_ms", "max_autotune_ms",
                                                               "candidates", "search_wall_s", "error")}), flush=True)

    threads = [threading.Thread(target=lane, args=(k,)) for k in range(max(1, args.lanes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report["lanes"] = args.lanes
    evals = [s for r in report["rows"] for s in r.get("eval_s", [])]
    walls = [r["search_wall_s"] / r["candidates"] for r in report["rows"] if r.get("candidates")]
    report["median_candidate_eval_s"] = median(evals) if evals else None
    report["median_search_s_per_iteration"] = median(walls) if walls else None
    report["wall_s"] = time.perf_counter() - started
    path.write_text(json.dumps(report, indent=1))
    text = table(report["rows"], bandwidth)
    (args.out / f"table_{args.strategy}.md").write_text(text + "\n")
    print(f"\n{report['gpu']}, torch {report['torch']}, triton {report['triton']}, copy bandwidth "
          f"{bandwidth / 1e12:.2f} TB/s; {args.strategy}, builtin proposer, {args.iterations} iterations; "
          f"median worker wall per candidate {report['median_candidate_eval_s']} s, search wall per "
          f"iteration {report['median_search_s_per_iteration']} s; total {report['wall_s']:.0f} s")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
