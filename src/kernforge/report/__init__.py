"""report: terminal tables made from captures and run folders."""

from kernforge.report.tables import (
    candidate_lines,
    capture_summary,
    end_to_end_tables,
    eval_report,
    phases_line,
    profile_table,
    results_table,
    run_json,
    runs_table,
)

__all__ = ["candidate_lines", "capture_summary", "end_to_end_tables", "eval_report", "phases_line", "profile_table", "results_table",
           "run_json", "runs_table"]
