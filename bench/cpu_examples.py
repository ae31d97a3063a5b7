"""The cpu backend's search on the bundled examples, on this machine (no GPU).

    python bench/cpu_examples.py --iterations 12 --out bench/results/cpu

One `kernforge optimize example:NAME --backend cpu` per example (small scale: the
CPU-sized copies), MCTS and the builtin proposer by default; the per-op results
table is printed last and everything is written to OUT/cpu_examples.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

EXAMPLES = ["attention", "resnet50", "gemma_decoder", "qwen_moe", "sd35_vae_decoder"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--strategy", default="mcts")
    parser.add_argument("--examples", default=",".join(EXAMPLES))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"machine": platform.processor() or platform.machine(), "cores": os.cpu_count(),
              "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
              "iterations": args.iterations, "strategy": args.strategy, "proposer": "builtin", "examples": []}
    for name in args.examples.split(","):
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "kernforge", "optimize", f"example:{name}", "--backend", "cpu",
                               "--scale", "small", "--iterations", str(args.iterations), "--top-k", str(args.top_k),
                               "--strategy", args.strategy, "--runs-dir", str(args.out / "runs"), "--json"],
                              capture_output=True, text=True, check=False)
        entry = {"example": name, "wall_s": time.perf_counter() - started}
        if proc.returncode != 0:
            entry["error"] = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        else:
            data = json.loads(proc.stdout)
            entry.update(tasks=data["tasks"], skipped=data["skipped"][:6], run_dir=data["run_dir"])
        report["examples"].append(entry)
        (args.out / "cpu_examples.json").write_text(json.dumps(report, indent=1))
        print(f"{name}: {entry['wall_s']:.0f} s {entry.get('error', '')}", flush=True)
    print(f"\n{report['machine']}, {report['cores']} cores; {args.strategy}, builtin proposer, "
          f"{args.iterations} iterations per op, top {args.top_k} ops per example\n")
    print("| example | op | shape | dtype | share | eager ms | best ms | speedup | verdict | candidates (ok) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for e in report["examples"]:
        for t in e.get("tasks", []):
            best = f"{t['best_p50_ms']:.4f}" if t["best_p50_ms"] else "-"
            speed = f"{t['best_speedup_vs_eager']:.2f}x" if t["best_speedup_vs_eager"] else "-"
            eager = f"{t['eager_p50_ms']:.4f}" if t["eager_p50_ms"] else "-"
            print(f"| {e['example']} | {t['op']} | {t['shape']} | {t['dtype']} | {t['share']:.1%} | {eager} | "
                  f"{best} | {speed} | {t['verdict']} | {t['candidates']} ({t['correct']}) |")
        if e.get("error"):
            print(f"| {e['example']} | error: {e['error']} | | | | | | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
