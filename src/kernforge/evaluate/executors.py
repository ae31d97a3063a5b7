"""Where worker jobs run: on this machine (one worker per GPU slot), or on a Ray cluster.

An executor runs one job (a baseline or a candidate, see worker.py) and gives back
what run_job gives: the worker's result (None if it died), its log tail, and the
wall seconds. Everything else, the static scan, the judge against the oracle and
the timing verdict, stays in the search process (runner.py), whatever the executor.

local  Jobs run as worker processes here. With GPUs, each job is pinned to one GPU
       (CUDA_VISIBLE_DEVICES) and `per_device` jobs may share a GPU: their builds and
       checks overlap, their timings take that GPU alone (device_lock.py), so a figure
       is never measured beside another kernel.
ray    Jobs run on a Ray cluster (evaluate/ray_executor.py): the job's files travel
       with it, the results, logs and build outputs come back; the run folder and the
       oracle stay on this machine.
"""

from __future__ import annotations

import os
import queue
from pathlib import Path
from typing import Any

from kernforge.errors import UserError
from kernforge.evaluate import forked
from kernforge.evaluate.jobs import Executor, JobResult, machine_lock_dir

class LocalExecutor:
    """Worker processes on this machine, one slot per (GPU, k): a job takes a free slot and
    runs pinned to its GPU, with that GPU's lock (lock_dir None: no lock, for one job alone)."""

    def __init__(self, gpus: list[int] | None, per_device: int, lock_dir: Path | None):
        self.per_device = max(1, per_device)
        self.lock_dir = lock_dir
        self._slots: queue.Queue[int | None] = queue.Queue()
        for gpu in gpus or [None]:
            for _ in range(self.per_device):
                self._slots.put(gpu)
        self.capacity = self._slots.qsize()

    def run(self, job: dict[str, Any], job_dir: Path, timeout_s: float) -> JobResult:
        from kernforge.evaluate.runner import run_job

        gpu = self._slots.get()
        try:
            env = {"CUDA_VISIBLE_DEVICES": physical_gpu(gpu)} if gpu is not None else {}
            lock = str(self.lock_dir / device_lock_name(gpu)) if self.lock_dir is not None else None
            return run_job({**job, "device_lock": lock, "gpu": gpu}, job_dir, timeout_s, env)
        finally:
            self._slots.put(gpu)

    def close(self) -> None:
        pass


def device_lock_name(gpu: int | None) -> str:
    return "cpu.lock" if gpu is None else f"gpu-{physical_gpu(gpu)}.lock"


def physical_gpu(index: int) -> str:
    """The CUDA_VISIBLE_DEVICES entry for this process's GPU `index`: this process may itself see
    a subset of the machine's GPUs (its own CUDA_VISIBLE_DEVICES), which a worker must keep."""
    own = os.environ.get("CUDA_VISIBLE_DEVICES")
    if own is None or not own.strip():
        return str(index)
    return [x.strip() for x in own.split(",") if x.strip()][index]


def visible_gpus(choice: str, count: int) -> list[int]:
    """'all' -> every visible GPU; '0,2' -> those (each must be visible)."""
    if choice == "all":
        return list(range(count))
    try:
        wanted = [int(x) for x in choice.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--gpus takes 'all' or GPU indices like 0,1; not '{choice}'") from None
    missing = [g for g in wanted if not 0 <= g < count]
    if missing or not wanted:
        raise UserError(f"--gpus {choice}: this machine has {count} visible GPU(s), indices 0..{count - 1}")
    return wanted


def preflight(name: str, ray_address: str) -> None:
    """Fail before a run starts when the executor cannot work: an unknown name, Ray missing
    or its cluster unreachable."""
    if name not in ("local", "ray"):
        raise UserError(f"unknown executor '{name}'; choose one of: local, ray")
    if name == "ray":
        from kernforge.evaluate.ray_executor import check_address

        check_address(ray_address)


def make_executor(name: str, device: str, per_device: int, gpus: str = "all",
                  ray_address: str = "local") -> Executor:
    if name == "local":
        if device != "cuda":
            if forked.enabled(device):
                forked.SERVER.ready()  # here, on the main thread: the server starts deaf to Ctrl-C
            return LocalExecutor(None, per_device, machine_lock_dir())
        import torch

        return LocalExecutor(visible_gpus(gpus, torch.cuda.device_count()), per_device, machine_lock_dir())
    if name == "ray":
        from kernforge.evaluate.ray_executor import RayExecutor

        return RayExecutor(ray_address, device, per_device)
    raise UserError(f"unknown executor '{name}'; choose one of: local, ray")
