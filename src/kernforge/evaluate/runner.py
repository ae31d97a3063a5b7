"""Run worker jobs in their own process group, with a hard time limit.

The search process never imports a candidate. Whatever a candidate does, a
segfault, `os._exit`, an endless loop, the search gets back a result: the
worker's own, or one made here from its exit status and the last lines of its log.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kernforge
from kernforge.backends import get_backend
from kernforge.evaluate.executors import Executor
from kernforge.evaluate.judge import judge, timing_verdict
from kernforge.evaluate.scan import Finding, scan_source
from kernforge.evaluate.timing import Timing, clearly_faster, confirmed_by_sync
from kernforge.tasks import load_task

LOG_TAIL_LINES = 30
FRESH_KINDS = ("normal", "large", "mixed")


@dataclass
class EvalResult:
    # ok | compile_error | runtime_error | wrong_result | cheat | out_of_memory | crash | timeout
    status: str
    reason: str = ""
    errors: list[list[float]] = field(default_factory=list)  # per input set, per output
    timing: Timing | None = None
    eager: Timing | None = None  # eager, timed in the same worker just before the candidate
    speedup_vs_eager: float | None = None
    faster_than_eager: bool = False  # beyond the measured noise
    log_tail: str = ""
    wall_s: float = 0.0  # the worker's whole life: start, build, checks, timing
    phases: dict[str, float] = field(default_factory=dict)  # seconds per step inside the worker
    # eager's median before the candidate loaded and right after its timing; `eager` is the faster
    eager_before_after_ms: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def timed(self) -> bool:
        return self.timing is not None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EvalResult:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for key in ("timing", "eager"):
            fields[key] = Timing(**data[key]) if data.get(key) else None
        return cls(**fields)

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["timing"] = self.timing.__dict__ if self.timing else None
        data["eager"] = self.eager.__dict__ if self.eager else None
        data["timed"] = self.timed
        return data


@dataclass
class Baseline:
    eager: Timing | None
    device_name: str
    labels: list[str]
    eager_errors: list[list[float]]
    # torch.compile of the op alone, per mode: {"timing": Timing-dict or None, "error": str}
    compiled: dict[str, dict[str, Any]] = field(default_factory=dict)


def run_job(job: dict[str, Any], job_dir: Path, timeout_s: float, env_extra: dict[str, str] | None = None,
            prestart: bool = True) -> tuple[dict[str, Any] | None, str, float]:
    """Run one job in a worker process here; return (result or None if the worker died, log tail,
    wall seconds). env_extra goes into the worker's environment (CUDA_VISIBLE_DEVICES: its GPU).
    prestart: start the next job's worker meanwhile; not on a Ray node, where Ray sets each task's
    CUDA_VISIBLE_DEVICES, so a waiting worker seldom matches the next job and would only hold a
    CUDA context."""
    job_dir.mkdir(parents=True, exist_ok=True)
    job = {**job, "result_path": str(job_dir / "result.json")}
    (job_dir / "job.json").write_text(json.dumps(job, indent=1))
    Path(job["result_path"]).unlink(missing_ok=True)
    log_path = job_dir / "log.txt"
    env = {**os.environ, "PYTHONPATH": _pythonpath(), "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    started = time.perf_counter()
    proc = WORKERS.take(job["device"], env)
    if proc is not None:
        log_path.write_text("")  # the worker opens it for its output once it has the job
        try:
            proc.stdin.write(f"{job_dir / 'job.json'}\n")
            proc.stdin.close()
        except OSError:  # it died after take() saw it alive: start a fresh one below instead
            _kill_group(proc)
            proc = None
    if prestart:
        WORKERS.prestart(job["device"], env)  # the next job's worker starts while this one runs
    with open(log_path, "a") as log:
        if proc is None:
            proc = subprocess.Popen([sys.executable, "-m", "kernforge.evaluate.worker", str(job_dir / "job.json")],
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            tail = _tail(log_path)
            return None, f"timed out after {timeout_s:.0f} s\n{tail}", time.perf_counter() - started
        finally:
            _kill_group(proc)  # nothing the candidate started may outlive its worker
    wall = time.perf_counter() - started
    result_path = Path(job["result_path"])
    if proc.returncode == 0 and result_path.exists():
        return json.loads(result_path.read_text()), _tail(log_path), wall
    return None, f"{_exit_text(proc.returncode)}\n{_tail(log_path)}", wall


MAX_READY_WORKERS = 64


class PrestartedWorkers:
    """Worker processes started ahead of their job: each has imported torch and made its CUDA
    context before a job is handed over, so that the time is spent while the previous candidate
    runs (on the H200 a GPU worker lived 5.5-6.2 s, of which 1.5-2.3 s were its build, checks
    and timings). Each still serves one job and exits: isolation is unchanged. A worker is used
    only with the environment it started with; one left over when the search ends sees its
    stdin close and exits.

    Not for CPU jobs: the waiting worker's torch import takes cores from the running job's
    timing. On 2 cores it made eager 7.8-12.9 ms for a (8, 256, 56, 56) batch norm that takes
    0.4-1.2 ms undisturbed, and the candidate, timed once the import was over, look 7-16x faster."""

    def __init__(self, devices: tuple[str, ...] = ("cuda",)) -> None:
        self.devices = devices  # the devices whose jobs get a prestarted worker
        self._ready: list[tuple[str, dict[str, str], subprocess.Popen]] = []
        self._lock = threading.Lock()
        self.enabled = os.environ.get("KERNFORGE_PRESTART", "1") != "0"
        atexit.register(self.close)

    def take(self, device: str, env: dict[str, str]) -> subprocess.Popen | None:
        with self._lock:
            for i, (dev, started_env, proc) in enumerate(self._ready):
                if dev == device and started_env == env and proc.poll() is None:
                    del self._ready[i]
                    return proc
        return None

    def prestart(self, device: str, env: dict[str, str]) -> None:
        if not self.enabled or device not in self.devices:
            return
        proc = subprocess.Popen([sys.executable, "-m", "kernforge.evaluate.worker", "--wait", device],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, env=env, text=True)
        with self._lock:
            self._ready.append((device, env, proc))
            # Workers whose environment never comes again (a Ray node's tasks get their GPU in
            # CUDA_VISIBLE_DEVICES, which varies) are not kept without bound: the oldest go.
            stale, self._ready = self._ready[:-MAX_READY_WORKERS], self._ready[-MAX_READY_WORKERS:]
        for _, _, old in stale:
            _kill_group(old)

    def close(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        for _, _, proc in ready:
            _kill_group(proc)


WORKERS = PrestartedWorkers()


# reference (inputs) path -> oracle path. The oracle lives in a private temporary folder
# whose name no worker is told; only this process reads it.
_ORACLES: dict[str, Path] = {}


def oracle_path_for(reference_path: Path) -> Path:
    key = str(reference_path.resolve())
    if key not in _ORACLES:
        _ORACLES[key] = Path(tempfile.mkdtemp(prefix="kf-oracle-")) / "oracle.pt"
    return _ORACLES[key]


def discard_reference(reference_path: Path) -> None:
    """Remove a task's inputs and oracle files (large; recomputable from the saved samples)."""
    reference_path.unlink(missing_ok=True)
    oracle = _ORACLES.pop(str(reference_path.resolve()), None)
    if oracle is not None:
        shutil.rmtree(oracle.parent, ignore_errors=True)


def evaluate_baseline(task_path: Path, reference_path: Path, device: str, job_dir: Path,
                      timeout_s: float, compile_modes: tuple[str, ...] = (),
                      executor: Executor | None = None) -> Baseline:
    job = {"mode": "baseline", "task_path": str(task_path), "reference_path": str(reference_path),
           "oracle_path": str(oracle_path_for(reference_path)),
           "device": device, "backend": "none", "fresh_kinds": list(FRESH_KINDS),
           "compile_modes": list(compile_modes)}
    result, tail, _ = (executor.run if executor else run_job)(job, job_dir, timeout_s)
    if result is None:
        raise RuntimeError(f"the baseline for {task_path.parent.name} failed: {tail}")
    return Baseline(eager=Timing(**result["eager"]), device_name=result["device_name"],
                    labels=result["labels"], eager_errors=result["eager_errors"],
                    compiled=result.get("compiled", {}))


def evaluate_candidate(task_path: Path, reference_path: Path, source: Path, backend: str, device: str,
                       job_dir: Path, timeout_s: float, executor: Executor | None = None) -> EvalResult:
    """Scan, build, check and time one candidate. The scan and the judgement happen here; the
    worker runs where the executor puts it (default: a worker process here)."""
    findings = static_findings(task_path, source, backend)
    if findings:
        return EvalResult(status="cheat", reason="static scan: " + "; ".join(str(f) for f in findings))
    job = {"mode": "candidate", "task_path": str(task_path), "reference_path": str(reference_path),
           "source": str(source), "backend": backend, "device": device,
           "build_dir": str(job_dir / "build"), "memory_limit_bytes": memory_limit_bytes(reference_path),
           "outputs_path": str(job_dir / "outputs.pt")}
    result, tail, wall = (executor.run if executor else run_job)(job, job_dir, timeout_s)
    if result is not None and result.get("outputs_path"):
        outputs = Path(result["outputs_path"])
        result.update(judge(outputs, oracle_path_for(reference_path)))
        outputs.unlink(missing_ok=True)  # as large as the inputs; the verdict is kept
    if result is None:
        status = "timeout" if tail.startswith("timed out") else "crash"
        return EvalResult(status=status, reason=tail.splitlines()[0], log_tail=tail, wall_s=wall)
    timing = Timing(**result["timing"]) if result.get("timing") else None
    eager = Timing(**result["eager_timing"]) if result.get("eager_timing") else None
    out = EvalResult(status=result["status"], reason=result.get("reason", ""),
                     errors=result.get("errors", []), timing=timing, eager=eager,
                     log_tail=tail, wall_s=wall,
                     phases=result.get("phases", {}),
                     eager_before_after_ms=result.get("eager_p50_ms_before_after", []))
    if timing and eager and out.status == "ok":
        verdict = timing_verdict(timing, eager)
        out.status, out.reason = verdict.get("status", out.status), verdict.get("reason", out.reason)
    if out.status != "ok":
        # The worker times before the outputs are judged here; a rejected kernel's time means nothing.
        out.timing, out.eager = None, None
    if timing and eager and out.status == "ok":
        out.speedup_vs_eager = eager.p50_ms / timing.p50_ms
        # Beyond the noise by the events, and not slower once every stream is waited for.
        out.faster_than_eager = clearly_faster(timing, eager) and confirmed_by_sync(timing, eager)
    return out


def static_findings(task_path: Path, source: Path, backend: str) -> list[Finding]:
    task = load_task(task_path)
    language = get_backend(backend).language
    dtype = task.tensor_args[0]["dtype"] if task.tensor_args else "torch.float32"
    return scan_source(source.read_text(errors="replace"), language, dtype)


def memory_limit_bytes(reference_path: Path) -> int:
    """What a CPU worker may allocate: 4 GiB, or 8x the task's reference data if more,
    and never over three quarters of the machine's memory."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    wanted = max(4 << 30, 8 * (reference_path.stat().st_size if reference_path.exists() else 0))
    return min(wanted, total * 3 // 4)


def _pythonpath() -> str:
    """The worker imports kernforge from wherever this process did (installed or src/)."""
    root = str(Path(kernforge.__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH", "")
    return root + (os.pathsep + rest if rest else "")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        return f"worker killed by signal {signal.Signals(-code).name}"
    return f"worker exited with status {code} and no result"


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])
