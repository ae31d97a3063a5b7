"""Where the command line prints: stdout for results, stderr for progress and errors (tests swap
them), and the report parts two commands print."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console

from kernforge.records import EndToEnd


# Off a terminal rich would wrap tables at 80 columns; a log file can take wide rows.
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def print_llm_usage(usage: dict[str, Any] | None) -> None:
    if usage:
        out.print(f"LLM {usage['model']}: {usage['calls']} calls, {usage['prompt_tokens']:,} prompt + "
                  f"{usage['completion_tokens']:,} completion tokens, ${usage['cost_usd']:.4f}, "
                  f"{usage['latency_s']:.0f} s waiting on replies", markup=False, highlight=False)


def print_end_to_end(report: EndToEnd | None) -> None:
    from kernforge.report import end_to_end_tables

    if report is None:
        return
    if report.error:
        out.print(f"not applied to the model: {report.error}", markup=False, highlight=False)
        return
    for item in end_to_end_tables(report):
        out.print(item, markup=False, highlight=False) if isinstance(item, str) else out.print(item)
