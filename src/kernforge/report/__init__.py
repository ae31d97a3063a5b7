"""report: terminal tables made from captures and run folders."""

from kernforge.report.tables import profile_table, results_table, runs_table

__all__ = ["profile_table", "results_table", "runs_table"]
