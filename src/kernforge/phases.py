"""Where a run's time goes: the phases every run reports (summary.json, `show`, the dashboard).

Each phase is timed where it runs and recorded as a `phase` event (store/events.py); the
breakdown is their sum per phase, and what no phase accounts for is "other" (imports, task
set-up, the gaps between tasks)."""

from __future__ import annotations

import time

# In the order a run goes through them.
PHASES: dict[str, str] = {
    "load": "the model loaded and run once",
    "capture": "warm-up and the recorded forward passes",
    "replay": "hot signatures replayed alone for their time",
    "compiled_profile": "the model compiled and profiled, for the ranking under torch.compile",
    "samples": "input samples written to the run folder",
    "baselines": "each task's baseline worker: inputs, eager timing, the machine's bandwidth",
    "oracle": "each task's float64 oracle and per-element bounds, made and loaded",
    "compile_peers": "torch.compile of an op alone, timed where a candidate beat eager",
    "candidates": "the search: candidates built, judged and timed",
    "finalists": "the best candidates timed again, alone",
    "apply": "the winners installed into the model and measured end to end",
    "other": "what no phase accounts for",
}


class Stopwatch:
    """Seconds since the last lap."""

    def __init__(self) -> None:
        self._last = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        seconds, self._last = now - self._last, now
        return seconds


def phase_text(phase: str, done: int | None = None, total: int | None = None) -> str:
    """A phase as the terminal's status line and the dashboard's header name it: "capture",
    "candidates (3/10)" where its work is counted."""
    counted = f" ({done}/{total})" if done is not None and total is not None else ""
    return phase.replace("_", " ") + counted
