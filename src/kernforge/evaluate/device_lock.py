"""A readers-writer lock across worker processes that share one device.

Several candidates may be built and checked at once, but a timing must have the
device to itself: a kernel running beside the one being timed shares its SMs and
its memory bandwidth, and both figures would be wrong. Checks take the lock
shared, timings take it exclusive. A second lock file is the turnstile that every
taker passes through, so that a waiting timer is not starved by a stream of
checks (flock alone lets new shared takers past a waiting exclusive one).
On a CPU the checks take it exclusive too: they use the cores the timing needs.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class DeviceLock:
    def __init__(self, path: str | Path | None, checks_exclusive: bool = False):
        self.path = Path(path) if path else None
        self.checks_exclusive = checks_exclusive

    @contextmanager
    def for_checks(self) -> Iterator[None]:
        with self._hold(exclusive=self.checks_exclusive):
            yield

    @contextmanager
    def for_timing(self) -> Iterator[None]:
        with self._hold(exclusive=True):
            yield

    @contextmanager
    def _hold(self, exclusive: bool) -> Iterator[None]:
        if self.path is None:
            yield
            return
        turnstile = _open(self.path.with_name(self.path.name + ".turnstile"))
        main = _open(self.path)
        try:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            try:
                fcntl.flock(main, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            finally:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
            yield
        finally:
            os.close(main)  # closing drops the lock, also when the holder is killed
            os.close(turnstile)


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
