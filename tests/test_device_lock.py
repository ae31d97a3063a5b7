"""kernforge.evaluate.device_lock: timings hold the device alone, checks may share it."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from kernforge.evaluate.device_lock import DeviceLock

pytestmark = pytest.mark.timing

HOLD_S = 0.2


def hold(path: str, kind: str, checks_exclusive: bool, log: str, name: str) -> None:
    lock = DeviceLock(path, checks_exclusive=checks_exclusive)
    Path(log).with_name(f"{name}.trying").touch()
    with (lock.for_timing() if kind == "timing" else lock.for_checks()):
        Path(log).with_name(f"{name}.held").touch()
        start = time.time()
        while not Path(log).with_name("release").exists():  # the test says when to let go
            time.sleep(0.01)
        time.sleep(HOLD_S)
        end = time.time()
    with open(log, "a") as f:
        f.write(f"{kind} {start} {end}\n")


def intervals(tmp_path: Path, kinds: list[str], checks_exclusive: bool = False) -> list[tuple[str, float, float]]:
    log = str(tmp_path / "log.txt")
    # forked: the holders need only the lock module, and a spawned one would import torch again (~2.5 s)
    ctx = multiprocessing.get_context("fork")
    procs = []
    for i, kind in enumerate(kinds):
        procs.append(ctx.Process(target=hold, args=(str(tmp_path / "dev.lock"), kind, checks_exclusive, log,
                                                    f"p{i}")))
        procs[-1].start()
        # In this order, whatever the machine's load: the first holds the lock before the
        # second tries, the second is waiting before the third tries.
        marker = tmp_path / (f"p{i}.held" if i == 0 else f"p{i}.trying")
        while not marker.exists():
            time.sleep(0.01)
        time.sleep(0.1)
    # Let go once every process holds the lock, or after a second in which the others wait.
    deadline = time.time() + 1.0
    while time.time() < deadline and not all((tmp_path / f"p{i}.held").exists() for i in range(len(kinds))):
        time.sleep(0.01)
    (tmp_path / "release").touch()
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    rows = [line.split() for line in Path(log).read_text().splitlines()]
    return [(k, float(s), float(e)) for k, s, e in rows]


def overlap(a: tuple[str, float, float], b: tuple[str, float, float]) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_checks_share_the_device(tmp_path):
    rows = intervals(tmp_path, ["checks", "checks"])
    assert overlap(rows[0], rows[1])


def test_a_timing_never_overlaps_anything(tmp_path):
    rows = intervals(tmp_path, ["checks", "timing", "checks"])
    timing = next(r for r in rows if r[0] == "timing")
    assert not any(overlap(timing, r) for r in rows if r is not timing)


def test_a_waiting_timing_goes_before_later_checks(tmp_path):
    rows = intervals(tmp_path, ["checks", "timing", "checks"])
    first, timing, last = sorted(rows, key=lambda r: r[1])
    assert (first[0], timing[0], last[0]) == ("checks", "timing", "checks")


def test_on_a_cpu_checks_are_exclusive_too(tmp_path):
    rows = intervals(tmp_path, ["checks", "checks"], checks_exclusive=True)
    assert not overlap(rows[0], rows[1])


def test_no_path_means_no_lock(tmp_path):
    lock = DeviceLock(None)
    with lock.for_timing(), lock.for_timing():
        pass  # re-entrant because it does nothing
