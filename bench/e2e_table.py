"""The end-to-end table of one or more `kernforge apply` reports (integrate/apply.json files):
each model six ways (eager, patched eager, compile, patched compile, and each under CUDA graphs),
the speedups with apply's verdict and its repeat, the routing costs, and what was installed.

    PYTHONPATH=src python bench/e2e_table.py OUT/*-apply.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kernforge.records import EndToEnd, VariantName

V = VariantName
PAIRS = [(V.PATCHED_EAGER, V.EAGER), (V.PATCHED_COMPILE, V.COMPILE), (V.GRAPH_PATCHED, V.GRAPH_EAGER),
         (V.RO_PATCHED, V.RO_COMPILE)]


def cell(report: EndToEnd, variant: VariantName, base: VariantName) -> str:
    t, s = report.timings_ms, report.comparison(variant, base)
    if base not in t:
        return "-"
    if not s or variant not in t:
        return f"{t[base].p50_ms:.3f} ms, -"
    repeat = f" / {s.repeat_speedup:.2f}x" if s.repeat_speedup else ""
    return f"{t[base].p50_ms:.3f} -> {t[variant].p50_ms:.3f} ms: {s.speedup:.2f}x{repeat} ({s.verdict_text})"


def details(name: str, report: EndToEnd) -> None:
    """What was installed, each route's cost and the failed checks, under the table."""
    print(f"\n{name}: {report.note} {'; '.join(report.notes)}")
    for k in report.kernels:
        print(f"  {k.kernel[:60]}: op {k.op_speedup_vs_eager:.2f}x, {k.calls_per_forward} calls, "
              f"eager {k.eager_verdict or ''} {k.eager_speedup or 0:.3f}x, compile {k.compile_text} "
              f"{k.compile_speedup or 0:.3f}x, installed eager={k.installed_eager} "
              f"compile={k.installed_compile} {k.note[:120]}")
    for r in report.routing:
        # a report written before the ATen call was timed has only the refused call's figure
        aten = r.aten_us if r.aten_us is not None else r.original_us
        print(f"  route {r.kernel[:50]} via {r.via} native={r.native}: hit {r.routed_hit_us:.1f} us "
              f"(direct {r.direct_us:.1f}, ATen {aten:.1f}), miss {r.miss_overhead_us:+.1f} us")
    failed = [c for c in report.checks if not c.passed]
    print(f"  checks: {len(report.checks)}, failed {len(failed)}: "
          + "; ".join(f"{c.variant}/{c.inputs}: {c.why[:80]}" for c in failed))


def main(paths: list[str]) -> None:
    reports = [(Path(p).stem, EndToEnd.from_json(json.loads(Path(p).read_text()))) for p in paths]
    print("| run | eager -> patched | compile -> patched | eager CUDA graph -> patched | reduce-overhead -> patched |")
    print("|---|---|---|---|---|")
    for name, report in reports:
        print(f"| {name} | " + " | ".join(cell(report, *p) for p in PAIRS) + " |")
    for name, report in reports:
        details(name, report)


if __name__ == "__main__":
    main(sys.argv[1:])
