"""A timing as a record: the percentiles of one measurement of calls, with the cross-checks a
GPU session adds.

Both devices return it (harness/session.py times the calls), so that eager and candidate are
compared on equal terms; what follows from two of them (faster beyond the noise, work that
escaped the events) is harness/timing.py's. A worker writes it as its fields' dict (result.json,
baseline.json) and Timing(**fields) reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Timing:
    p20_ms: float
    p50_ms: float
    p80_ms: float
    runs: int
    method: str  # how the calls were timed: "cuda-events,l2-flush-read,..." or the host clock's
    synced_ms: float | None = None  # GPU: median with a device-wide sync before the end event
    host_ms: float | None = None  # GPU: host clock over back-to-back calls ending in a sync, per call
    # GPU: the least time, over the synchronised calls, from the stream's own end of the call to
    # the end of a device-wide sync: the sync's cost, plus work the stream did not wait for
    sync_gap_ms: float | None = None
    copies: int = 1  # input sets rotated through

    @property
    def spread(self) -> float:
        """(p80 - p20) / p50: the relative noise of this measurement."""
        return (self.p80_ms - self.p20_ms) / self.p50_ms if self.p50_ms > 0 else 0.0
