"""What every executor is (executors.py runs jobs here, ray_executor.py on a cluster): the
Executor protocol, a job's result, and where the machine's device locks live."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Protocol

JobResult = tuple[dict[str, Any] | None, str, float]


class Executor(Protocol):
    capacity: int  # jobs it can run at once

    def run(self, job: dict[str, Any], job_dir: Path, timeout_s: float) -> JobResult: ...

    def close(self) -> None: ...


def machine_lock_dir() -> Path:
    """Device locks are per machine, not per run: two searches on one GPU (or one CPU) must not
    time beside each other either."""
    path = Path(tempfile.gettempdir()) / "kernforge-locks"
    path.mkdir(exist_ok=True)
    return path
