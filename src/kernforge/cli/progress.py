"""The live view of a search on a terminal, plain lines elsewhere."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table


from kernforge.cli import console


class Progress:
    """A live table on a terminal (one row per task: iteration, best speedup so far, counts per
    status, the latest candidate), with each candidate's line above it; plain lines otherwise;
    nothing with --json. It reads the run's typed events (store/events.py) as the store writes
    them: the same records a dashboard tails from events.jsonl."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.live: Live | None = None
        self.rows: dict[str, dict[str, str]] = {}
        # the phase under way (its phase_start event), above the table; the candidates phase counts on
        self.phase: Any = None
        self.phase_done: int | None = None
        self.status = Spinner("dots", text="starting")

    def __enter__(self):
        if console.err.is_terminal and not self.quiet:
            self.live = Live(self._view(), console=console.err, refresh_per_second=4, transient=False)
            self.live.start()
        return self.on_event

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.stop()

    def on_event(self, event: Any) -> None:
        from kernforge.store import events as ev

        if self.quiet:
            return
        if isinstance(event, ev.PhaseStarted):
            self.phase, self.phase_done = event, event.done
        elif isinstance(event, ev.NodeFinished) and self.phase is not None and self.phase.task == event.task:
            self.phase_done = event.candidates
        self._update_status()
        if isinstance(event, ev.Captured):
            ranked = ", ranked under torch.compile" if event.ranked_by == "compile" else ""
            self._say(f"captured {event.signatures} op signatures, {event.op_time_ms:.2f} ms of op time per "
                      f"forward{ranked}")
            if event.warning:
                self._say(event.warning)
        elif isinstance(event, ev.TasksChosen):
            for t in event.tasks:
                self.rows[t["task"]] = {"task": f"{t['op']} {t['shape']}", "share": f"{t['share']:.1%}",
                                        "done": "0", "total": "?", "best": "-", "counts": "", "last": "waiting"}
        elif isinstance(event, ev.TaskStarted):
            self.rows[event.task] = {**self.rows.get(event.task, {}), "task": f"{event.op} {event.shape}",
                                     "share": f"{event.share:.1%}", "done": str(event.resumed_nodes),
                                     "total": str(event.iterations), "best": "-", "counts": "", "last": "searching"}
            if not self.live:
                seeded = f", seeded from {event.seeded_from}" if event.seeded_from else ""
                self._say(f"searching {event.op} {event.shape} ({event.share:.1%} of model time), "
                          f"{event.iterations} iterations{seeded}")
        elif isinstance(event, ev.NodeFinished):
            speed = f"{event.speedup_vs_eager:.2f}x vs eager" if event.speedup_vs_eager else ""
            line = f"  {event.node} {event.status:13} {speed:16} {event.rationale[:70]}"
            standing = {"done": str(event.candidates), "best": _best_text(event.best_speedup_vs_eager),
                        "counts": _counts_text(event.counts), "last": f"{event.node} {event.status}"}
            self.rows.setdefault(event.task, _blank_row(event.task)).update(standing)
            self._say(line if self.live else f"{line}  [best {standing['best']} | {standing['counts']}]")
        elif isinstance(event, ev.Confirmed):
            speed = f"{event.speedup_vs_eager:.2f}x vs eager" if event.speedup_vs_eager else event.status
            before = f"{event.search_speedup_vs_eager:.2f}x" if event.search_speedup_vs_eager else "-"
            self._say(f"  {event.node} again, alone: {speed} (in the search {before})")
            self.rows.setdefault(event.task, _blank_row(event.task)).update(
                best=_best_text(event.best_speedup_vs_eager), last=f"{event.node} again")
        elif isinstance(event, ev.TaskEnded):
            self.rows.setdefault(event.task, _blank_row(event.task)).update(last="done")
        elif isinstance(event, ev.ApplyProgress):
            self._say(event.line)
        if self.live:
            self.live.update(self._view())

    def _update_status(self) -> None:
        from kernforge.phases import phase_text

        if self.phase is not None:
            where = f" · {self.phase.task}" if self.phase.task else ""
            self.status.update(text=phase_text(self.phase.phase, self.phase_done, self.phase.total) + where)

    def _view(self) -> Group:
        """The status line, then the table: one Spinner kept across updates, so that it turns."""
        return Group(self.status, self._table())

    def _table(self) -> Table:
        table = Table(title="kernforge search", title_justify="left", expand=False)
        for column in ("task", "share", "iteration", "best vs eager", "status counts", "latest"):
            table.add_column(column, no_wrap=column != "status counts")
        for row in self.rows.values():
            table.add_row(row["task"], row["share"], f"{row['done']}/{row['total']}", row["best"],
                          row["counts"], row["last"])
        return table

    def _say(self, text: str) -> None:
        if self.live:
            self.live.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=sys.stderr, flush=True)


def _blank_row(task: str) -> dict[str, str]:
    return {"task": task, "share": "", "done": "0", "total": "?", "best": "-", "counts": "", "last": ""}


def _best_text(speedup: float | None) -> str:
    """Best speedup beyond the noise so far; 1.00x until a kernel beat eager."""
    return f"{speedup:.2f}x" if speedup else "1.00x"


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
