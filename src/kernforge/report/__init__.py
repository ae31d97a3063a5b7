"""report: terminal tables made from captures and run folders."""

from kernforge.report.tables import (
    capture_summary,
    eval_report,
    profile_table,
    results_table,
    runs_table,
)

__all__ = ["capture_summary", "eval_report", "profile_table", "results_table", "runs_table"]
