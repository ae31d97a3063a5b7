"""Rich tables for the terminal; the same rows go out as JSON with --json."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from kernforge.capture import Capture


def profile_table(capture: Capture, limit: int = 25, include_kinds: tuple[str, ...] = ("compute",)) -> Table:
    table = Table(title=f"{capture.model} on {capture.device}: "
                        f"{capture.total_time_us / 1e3:.3f} ms of captured op time per forward "
                        f"(plain forward {capture.forward_ms:.3f} ms)")
    text_columns = ("op", "module", "shape", "dtype")
    for name in ("rank", "op", "module", "shape", "dtype", "calls", "time ms", "share", "if 2x faster"):
        table.add_column(name, justify="left" if name in text_columns else "right")
    for i, p in enumerate(capture.ranked(include_kinds)[:limit]):
        table.add_row(str(i + 1), p.op, _short_module(p.module), p.shape_text, p.dtype_text, str(p.calls),
                      f"{p.time_us / 1e3:.3f}", f"{p.share:.1%}", f"{p.gain_if_2x:.3f}x")
    return table


def capture_summary(capture: Capture) -> str:
    what = "kernel time of a plain profiled pass" if capture.device.startswith("cuda") else \
        "wall time of a plain forward"
    return (f"captured op time is {capture.coverage:.1%} of the {what} "
            f"({capture.measured_total_us / 1e3:.3f} ms); a recorded pass took {capture.captured_ms:.1f} ms, "
            f"{capture.overhead:.1f}x a plain one; views, copies, allocations and random ops are "
            "left out of the ranking (--include)")


def _short_module(path: str, width: int = 32) -> str:
    return path if len(path) <= width else "..." + path[-(width - 3):]


def results_table(rows: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=title)
    for name in ("op", "shape", "dtype", "share", "eager ms", "best ms", "best speedup vs eager",
                 "correct/tried", "verdict"):
        table.add_column(name, justify="left" if name in ("op", "shape", "dtype", "verdict") else "right")
    for r in rows:
        table.add_row(r["op"], r["shape"], r["dtype"], f"{r['share']:.1%}", _ms(r["eager_p50_ms"]),
                      _ms(r["best_p50_ms"]), _speedup(r["best_speedup_vs_eager"]),
                      f"{r['correct']}/{r['candidates']}", r["verdict"])
    return table


def runs_table(runs: list[dict[str, Any]]) -> Table:
    table = Table(title="runs")
    for name in ("run", "model", "backend", "device", "tasks", "best speedup", "state"):
        table.add_column(name)
    for r in runs:
        table.add_row(r["run"], r["model"], r["backend"], r["device"], str(r["tasks"]),
                      _speedup(r["best_speedup"]), r["state"])
    return table


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"
