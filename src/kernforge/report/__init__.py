"""report: terminal tables made from captures and run folders."""

from kernforge.report.tables import (
    capture_summary,
    end_to_end_tables,
    eval_report,
    profile_table,
    results_table,
    runs_table,
)

__all__ = ["capture_summary", "end_to_end_tables", "eval_report", "profile_table", "results_table", "runs_table"]
