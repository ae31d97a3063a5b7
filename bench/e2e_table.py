"""The end-to-end table of one or more `kernforge apply` reports (integrate/apply.json files):
each model six ways (eager, patched eager, compile, patched compile, and each under CUDA graphs),
the speedups with apply's verdict and its repeat, the routing costs, and what was installed.

    python bench/e2e_table.py OUT/*-apply.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PAIRS = [("patched eager", "eager", "patched eager vs eager"),
         ("patched compile", "compile", "patched compile vs compile"),
         ("patched eager, CUDA graph", "eager, CUDA graph", "patched eager, CUDA graph vs eager, CUDA graph"),
         ("patched compile, reduce-overhead", "compile, reduce-overhead",
          "patched compile, reduce-overhead vs compile, reduce-overhead")]


def cell(report: dict, variant: str, base: str, key: str) -> str:
    t, s = report.get("timings_ms", {}), report.get("speedups", {}).get(key)
    if base not in t:
        return "-"
    if not s or variant not in t:
        return f"{t[base]['p50_ms']:.3f} ms, -"
    repeat = f" / {s['repeat_speedup']:.2f}x" if s.get("repeat_speedup") else ""
    return f"{t[base]['p50_ms']:.3f} -> {t[variant]['p50_ms']:.3f} ms: {s['speedup']:.2f}x{repeat} ({s['verdict']})"


def main(paths: list[str]) -> None:
    print("| run | eager -> patched | compile -> patched | eager CUDA graph -> patched | reduce-overhead -> patched |")
    print("|---|---|---|---|---|")
    for path in paths:
        report = json.loads(Path(path).read_text())
        print(f"| {Path(path).stem} | " + " | ".join(cell(report, *p) for p in PAIRS) + " |")
    for path in paths:
        report = json.loads(Path(path).read_text())
        print(f"\n{Path(path).stem}: {report.get('note') or ''} {'; '.join(report.get('notes', []))}")
        for k in report.get("kernels", []):
            print(f"  {k['kernel'][:60]}: op {k['op_speedup_vs_eager']:.2f}x, {k['calls_per_forward']} calls, "
                  f"eager {k['eager_verdict']} {k['eager_speedup'] or 0:.3f}x, compile {k['compile_verdict']} "
                  f"{k['compile_speedup'] or 0:.3f}x, installed eager={k['installed_eager']} "
                  f"compile={k['installed_compile']} {k['note'][:120]}")
        for r in report.get("routing", []):
            print(f"  route {r['kernel'][:50]} via {r.get('via', 'op')} native={r.get('native')}: hit "
                  f"{r['routed_hit_us']:.1f} us (direct {r['direct_us']:.1f}, ATen {r.get('aten_us', r.get('original_us', 0)):.1f}),"
                  f" miss {r['miss_overhead_us']:+.1f} us")
        failed = [c for c in report.get("checks", []) if not c["pass"]]
        print(f"  checks: {len(report.get('checks', []))}, failed {len(failed)}: "
              + "; ".join(f"{c['variant']}/{c['inputs']}: {c['why'][:80]}" for c in failed))


if __name__ == "__main__":
    main(sys.argv[1:])
