"""Run worker jobs in their own process group, with a hard time limit.

The search process never imports a candidate. Whatever a candidate does, a
segfault, `os._exit`, an endless loop, the search gets back a result: the
worker's own, or one made here from its exit status and the last lines of its log.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import kernforge
from kernforge.errors import strict
from kernforge.backends import get_backend
from kernforge.evaluate import forked
from kernforge.evaluate.forked import kill_worker
from kernforge.evaluate.judge import Oracle, judge, timing_verdict
from kernforge.backends.scan import Finding
from kernforge.harness.timing import clearly_faster, confirmed_by_sync
from kernforge.phases import Stopwatch
from kernforge.records.evaluation import Baseline, EvalResult
from kernforge.records.timing import Timing
from kernforge.tasks import load_task

if TYPE_CHECKING:
    from kernforge.evaluate.jobs import Executor

LOG_TAIL_LINES = 30


def run_job(job: dict[str, Any], job_dir: Path, timeout_s: float, env_extra: dict[str, str] | None = None,
            prestart: bool = True, fork: bool = True) -> tuple[dict[str, Any] | None, str, float]:
    """Run one job in a worker process here; return (result or None if the worker died, log tail,
    wall seconds). env_extra goes into the worker's environment (CUDA_VISIBLE_DEVICES: its GPU).
    prestart: start the next job's worker meanwhile; not on a Ray node, where Ray sets each task's
    CUDA_VISIBLE_DEVICES, so a waiting worker seldom matches the next job and would only hold a
    CUDA context. fork: a CPU job's worker is forked (evaluate.forked); not on a Ray node, whose
    worker process is Ray's own and untried as a fork server's parent. The result carries
    `host_marks`: this process's clock at each mark the worker's harness wrote at the start and
    end of a session of calls (see host_clock_disagrees)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    job = {**job, "result_path": str(job_dir / "result.json")}
    (job_dir / "job.json").write_text(json.dumps(job, indent=1))
    Path(job["result_path"]).unlink(missing_ok=True)
    log_path = job_dir / "log.txt"
    env = {**os.environ, "PYTHONPATH": _pythonpath(), "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    started = time.perf_counter()
    taken = WORKERS.take(job["device"], env)
    proc, marks = taken if taken is not None else (None, None)
    if proc is not None:
        log_path.write_text("")  # the worker opens it for its output once it has the job
        try:
            proc.stdin.write(f"{job_dir / 'job.json'}\n")
            proc.stdin.close()
        except OSError:  # it died after take() saw it alive: start a fresh one below instead
            kill_worker(proc)
            proc, marks = None, None
    if prestart:
        WORKERS.prestart(job["device"], env)  # the next job's worker starts while this one runs
    with open(log_path, "a") as log:
        if proc is None:
            marks = Marks()
            if fork and forked.enabled(job["device"]):
                proc = forked.SERVER.start(str(job_dir / "job.json"), env, str(log_path), marks.write_fd)
            else:
                proc = subprocess.Popen([sys.executable, "-m", "kernforge.evaluate.worker", str(job_dir / "job.json")],
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                        env={**env, "KF_MARK_FD": str(marks.write_fd)}, pass_fds=(marks.write_fd,))
            marks.started(proc.pid)
        with _RUNNING_LOCK:
            _RUNNING.add(proc)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_worker(proc)
            tail = _tail(log_path)
            return None, f"timed out after {timeout_s:.0f} s\n{tail}", time.perf_counter() - started
        finally:
            kill_worker(proc)  # nothing the candidate started may outlive its worker
            with _RUNNING_LOCK:
                _RUNNING.discard(proc)
    wall = time.perf_counter() - started
    result_path = Path(job["result_path"])
    if proc.returncode == 0 and result_path.exists():
        result = json.loads(result_path.read_text())
        result["host_marks"] = marks.collected()  # this process's, whatever the worker wrote
        return result, _tail(log_path), wall
    marks.collected()
    return None, f"{_exit_text(proc.returncode)}\n{_tail(log_path)}", wall


class Marks:
    """A pipe the worker's harness writes one byte to at the start (S) and end (E) of each session
    of calls; a thread here stamps each with this process's clock, which no candidate can reach,
    and with the seconds the worker's main thread has spent so far waiting for a core, by the
    kernel's account (/proc/PID/schedstat), which no candidate can lower."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self._stamps: list[tuple[str, float, float]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._pid = 0

    def started(self, pid: int) -> None:
        """Call once the worker holds its end: ours closes, so the pipe ends when the worker's does."""
        os.close(self.write_fd)
        self._pid = pid
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.read_fd, 64)
            except OSError:
                break
            if not data:
                break
            now, waited = time.perf_counter(), runqueue_wait_s(self._pid)
            self._stamps += [(chr(b), now, waited) for b in data]
        os.close(self.read_fd)

    def collected(self) -> list[tuple[str, float, float]]:
        self._thread.join(timeout=5.0)
        return list(self._stamps)


def runqueue_wait_s(pid: int) -> float:
    """Seconds the process's main thread has been runnable but not running (0 where unknown)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


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
        self._ready: list[tuple[str, dict[str, str], subprocess.Popen, Marks]] = []
        self._lock = threading.Lock()
        self.enabled = os.environ.get("KERNFORGE_PRESTART", "1") != "0"
        atexit.register(self.close)

    def take(self, device: str, env: dict[str, str]) -> tuple[subprocess.Popen, Marks] | None:
        with self._lock:
            for i, (dev, started_env, proc, marks) in enumerate(self._ready):
                if dev == device and started_env == env and proc.poll() is None:
                    del self._ready[i]
                    return proc, marks
        return None

    def prestart(self, device: str, env: dict[str, str]) -> None:
        if not self.enabled or device not in self.devices:
            return
        marks = Marks()
        proc = subprocess.Popen([sys.executable, "-m", "kernforge.evaluate.worker", "--wait", device],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, env={**env, "KF_MARK_FD": str(marks.write_fd)},
                                pass_fds=(marks.write_fd,), text=True)
        marks.started(proc.pid)
        with self._lock:
            self._ready.append((device, env, proc, marks))
            # Workers whose environment never comes again (a Ray node's tasks get their GPU in
            # CUDA_VISIBLE_DEVICES, which varies) are not kept without bound: the oldest go.
            stale, self._ready = self._ready[:-MAX_READY_WORKERS], self._ready[-MAX_READY_WORKERS:]
        for _, _, old, _ in stale:
            kill_worker(old)

    def close(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        for _, _, proc, _ in ready:
            kill_worker(proc)


WORKERS = PrestartedWorkers()

# The workers of the jobs running now. On Ctrl-C their results are lost anyway (only the search
# thread records a node, and it is the one interrupted; a resume evaluates them again), so
# stop_workers ends them rather than let the search wait up to a candidate's time-out for them.
_RUNNING: set[Any] = set()
_RUNNING_LOCK = threading.Lock()


def stop_workers() -> None:
    """Kill every running job's worker and the waiting prestarted ones (each job's thread reaps its
    own): for an interrupted search that must end now."""
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    for proc in running:
        forked.kill_group(proc.pid)
    WORKERS.close()


# reference (inputs) path -> the task's oracle, held in this process only: the baseline worker
# writes it to a file that is read and deleted as soon as that worker is gone, before any
# candidate of the task starts, so no candidate's process can open it.
_ORACLES: dict[str, Oracle] = {}


def oracle_for(reference_path: Path) -> Oracle:
    return _ORACLES[str(reference_path.resolve())]


def load_oracle(reference_path: Path, oracle_file: Path) -> Oracle:
    """The oracle mapped from its file, then the file unlinked: the mapping outlives the name, so
    no other process can open it, and its pages are the kernel's to drop and read again rather
    than a private copy (the VAE's group norm: 6.4 GB a task, which reading took seconds).
    The disk space is freed when the oracle is released."""
    try:
        oracle = Oracle(torch.load(oracle_file, weights_only=True, mmap=True))
    finally:
        oracle_file.unlink(missing_ok=True)
    _ORACLES[str(reference_path.resolve())] = oracle
    protect_process_memory()
    return oracle


def protect_process_memory() -> None:
    """Make this process non-dumpable: its memory, which holds the oracles, can then not be read
    through /proc/PID/mem or ptrace by a process of the same user (a candidate's worker) without
    CAP_SYS_PTRACE. It also turns off core dumps of this process. Run as root, this is no bar:
    root holds that capability (run searches as an ordinary user)."""
    if sys.platform != "linux":
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4, SUID_DUMP_DISABLE = 0
    except (OSError, AttributeError):
        pass


def discard_reference(reference_path: Path) -> None:
    """Remove a task's inputs file and its oracle (large; recomputable from the saved samples)."""
    reference_path.unlink(missing_ok=True)
    _ORACLES.pop(str(reference_path.resolve()), None)


def evaluate_baseline(task_path: Path, reference_path: Path, device: str, job_dir: Path,
                      timeout_s: float, compile_modes: tuple[str, ...] = (),
                      executor: Executor | None = None) -> Baseline:
    """The task's input sets, oracle and eager timing. `compile_modes` are recorded, not timed:
    evaluate_peers times them once a candidate gives them something to decide."""
    oracle_file = job_dir / "oracle.pt"
    job = {"mode": "baseline", "task_path": str(task_path), "reference_path": str(reference_path),
           "oracle_path": str(oracle_file), "device": device, "backend": "none"}
    clock = Stopwatch()
    try:
        result, tail, _ = (executor.run if executor else run_job)(job, job_dir, timeout_s)
        if result is None:
            raise RuntimeError(f"the baseline for {task_path.parent.name} failed: {tail}")
        if result.get("status", "ok") != "ok":  # a task the baseline found it cannot judge, with why
            raise RuntimeError(result["reason"])
        worker_s = clock.lap()
        load_oracle(reference_path, oracle_file)
    finally:
        oracle_file.unlink(missing_ok=True)
    return Baseline(eager=Timing(**result["eager"]), device_name=result["device_name"],
                    labels=result["labels"], eager_errors=result["eager_errors"],
                    compile_modes=list(compile_modes), hardware=result.get("hardware", {}),
                    phases=_baseline_phases(result.get("phases", {}), worker_s, clock.lap()))


def _baseline_phases(worker: dict[str, float], worker_s: float, load_s: float) -> dict[str, float]:
    """The baseline's wall time by run phase: the oracle's share (made in the worker, loaded
    here), and the rest (the worker's start and imports included)."""
    oracle = worker.get("oracle", 0.0)
    return {"baselines": max(0.0, worker_s - oracle), "oracle": oracle + load_s}


def evaluate_peers(task_path: Path, reference_path: Path, device: str, job_dir: Path, timeout_s: float,
                   compile_modes: tuple[str, ...], executor: Executor | None = None
                   ) -> tuple[dict[str, dict[str, Any]], float]:
    """torch.compile of the task's op alone, per mode, timed in a worker of its own on the
    baseline's input sets (reference_path, which must still exist): (Baseline.compiled, the
    worker's wall seconds). A worker that dies or runs out of time is each mode's error."""
    job = {"mode": "peers", "task_path": str(task_path), "reference_path": str(reference_path),
           "device": device, "backend": "none", "compile_modes": list(compile_modes)}
    result, tail, wall = (executor.run if executor else run_job)(job, job_dir, timeout_s)
    if result is None or "compiled" not in result:
        why = (tail.splitlines() or ["no result"])[0] if result is None else str(result.get("reason", ""))
        return {mode: {"timing": None, "error": f"the peers' worker failed: {why}"[:300]} for mode in compile_modes}, wall
    return result["compiled"], wall


def evaluate_candidate(task_path: Path, reference_path: Path, source: Path, backend: str, device: str,
                       job_dir: Path, timeout_s: float, executor: Executor | None = None) -> EvalResult:
    """Scan, build, check and time one candidate. The scan and the judgement happen here; the
    worker runs where the executor puts it (default: a worker process here). Whatever the
    candidate makes kernforge do, the answer is a result: an error raised here while judging it
    rejects the candidate with the reason (KERNFORGE_STRICT=1 re-raises it, for debugging).
    Its evaluation_s is all this took, the worker's life and the judging beside it."""
    started = time.perf_counter()
    result = _evaluate_candidate(task_path, reference_path, source, backend, device, job_dir, timeout_s, executor)
    result.evaluation_s = time.perf_counter() - started
    return result


def _evaluate_candidate(task_path: Path, reference_path: Path, source: Path, backend: str, device: str,
                        job_dir: Path, timeout_s: float, executor: Executor | None) -> EvalResult:
    findings = static_findings(task_path, source, backend)
    if findings:
        return EvalResult(status="cheat", reason="static scan: " + "; ".join(str(f) for f in findings),
                          failed_check="scan")
    job = {"mode": "candidate", "task_path": str(task_path), "reference_path": str(reference_path),
           "source": str(source), "backend": backend, "device": device,
           "build_dir": str(job_dir / "build"), "memory_limit_bytes": memory_limit_bytes(reference_path),
           "outputs_path": str(job_dir / "outputs.pt"),
           "prefill": _prefill_options(reference_path)}
    first = _judged_run(job, job_dir, timeout_s, executor, reference_path)
    if first.failed_check != "clock" and not first.noisy:
        return first
    # A busy machine can stall the worker between its clock and ours (an honest kernel beside
    # another worker on 2 cores was called a patched timer): only a disagreement that comes back
    # in a second run is a verdict, and a timing the machine spoilt is taken again.
    again = _judged_run(job, job_dir, timeout_s, executor, reference_path)
    if again.failed_check == "clock" and first.failed_check == "clock":
        again.reason = f"{again.reason} (and in an earlier run: {first.reason})"
    elif again.ok:
        again.retimed = first.reason or first.noisy
    again.wall_s += first.wall_s
    return again


def _prefill_options(reference_path: Path) -> list[list[dict[str, Any]]] | None:
    """What the worker may prefill each set's outputs with (prefill.py); None where this process
    holds no oracle for the task (the worker then uses the defaults, and judging fails as before)."""
    oracle = _ORACLES.get(str(reference_path.resolve()))
    return oracle.prefill_options() if oracle is not None else None


def _judged_run(job: dict[str, Any], job_dir: Path, timeout_s: float, executor: Executor | None,
                reference_path: Path) -> EvalResult:
    result, tail, wall = (executor.run if executor else run_job)(job, job_dir, timeout_s)
    started = time.perf_counter()
    try:
        verdict = _verdict(result, tail, wall, oracle_for(reference_path))
        # here, not in the worker: what the judgement of a large output costs shows beside its phases
        verdict.phases["judge"] = time.perf_counter() - started
        return verdict
    except Exception as e:  # noqa: BLE001 - a candidate that breaks the judge is a rejected candidate
        if strict():
            raise
        return EvalResult(status="crash", reason=f"kernforge failed while judging this candidate's outputs: "
                                                 f"{type(e).__name__}: {str(e)[:300]}", log_tail=tail, wall_s=wall,
                          failed_check="plain")
    finally:
        Path(job["outputs_path"]).unlink(missing_ok=True)  # as large as the inputs; the verdict is kept


def _verdict(result: dict[str, Any] | None, tail: str, wall: float, oracle: Oracle) -> EvalResult:
    busy = ""
    if result is not None and result.get("status") == "ok" and result.get("outputs_path"):
        disagreement = host_clock_disagrees(result)
        busy = "" if disagreement else busy_machine(result) or ""
        # The outputs first: a wrong kernel is wrong whatever the clocks say (they disagree on a
        # loaded machine too), and only a right one's time can be a patched timer's.
        result.update(judge(Path(result["outputs_path"]), oracle))
        if disagreement and result.get("status") == "ok":
            result.update({"status": "cheat", "reason": disagreement, "failed_check": "clock"})
    if result is None:
        status = "timeout" if tail.startswith("timed out") else "crash"
        return EvalResult(status=status, reason=tail.splitlines()[0], log_tail=tail, wall_s=wall, failed_check="run")
    timing = Timing(**result["timing"]) if result.get("timing") else None
    eager = Timing(**result["eager_timing"]) if result.get("eager_timing") else None
    out = EvalResult(status=str(result["status"]), reason=str(result.get("reason", "")),
                     errors=result.get("errors", []), timing=timing, eager=eager,
                     log_tail=tail, wall_s=wall,
                     phases=result.get("phases", {}),
                     eager_before_after_ms=result.get("eager_p50_ms_before_after", []),
                     failed_check=str(result.get("failed_check", "")),
                     set_verdicts=list(result.get("set_verdicts", [])))
    if out.status != "ok" and not out.failed_check:
        out.failed_check = "run"  # the worker's own verdict: a build error, an exception, out of memory
    if timing and eager and out.status == "ok":
        verdict = timing_verdict(timing, eager)
        out.status, out.reason = verdict.get("status", out.status), verdict.get("reason", out.reason)
        out.failed_check = verdict.get("failed_check", "")
    if out.status != "ok" or busy:
        # The worker times before the outputs are judged here; a rejected kernel's time means
        # nothing, and neither does one taken while the worker waited for a core.
        out.timing, out.eager, out.noisy = None, None, busy
    if out.timing and out.eager and out.status == "ok":
        timing, eager = out.timing, out.eager
        out.speedup_vs_eager = eager.p50_ms / timing.p50_ms
        # Beyond the noise by the events, and not slower once every stream is waited for.
        out.faster_than_eager = clearly_faster(timing, eager) and confirmed_by_sync(timing, eager)
    return out


# The worker's account of a session (its own clock, its calls' measured times) against this
# process's clock between the session's marks: agreement within 50 ms and 10% of the session.
HOST_SLACK_S, HOST_SLACK_SHARE = 0.05, 0.10
# Call times the worker reports may fall short of what this process's clock implies (its wall
# time a call less the harness's own cost a call, from eager's session in the same worker before
# the candidate loaded) by at most half the implied time plus that cost again: the harness's cost
# varies from session to session (a CPU worker beside a busy Ray node took 0.30 ms a call where
# eager's session implied 0.16). So a timer that hides most of a call is caught where the call
# costs more than the harness around it (on a GPU ~0.56 ms: flush, runway, copies).
IMPLIED_SLACK_SHARE, IMPLIED_SLACK_MS = 0.5, 0.05


def host_clock_disagrees(result: dict[str, Any], count_waits: bool = True) -> str | None:
    """Why the worker's timings cannot be believed, if they cannot: its sessions do not match the
    marks this process stamped, its host clock disagrees with ours, or its calls took less time
    than ours saw pass (a patched timer). The time the worker's main thread spent waiting for a
    core is nobody's call time (count_waits=False: as if it were)."""
    sessions, marks = result.get("sessions", []), result.get("host_marks")
    if marks is None or not sessions:
        return None  # a worker run elsewhere (tests calling the worker directly)
    kinds = "".join(m[0] for m in marks)
    if kinds != "SE" * len(sessions):
        return (f"the harness's session marks were tampered with: {len(sessions)} sessions reported, "
                f"marks {kinds[:40]!r}")
    walls = [marks[2 * i + 1][1] - marks[2 * i][1] for i in range(len(sessions))]
    for session, wall in zip(sessions, walls):
        if abs(wall - session["host_s"]) > HOST_SLACK_S + HOST_SLACK_SHARE * wall:
            return (f"the worker's clock disagrees with the search process's: session '{session['name']}' "
                    f"took {session['host_s']:.3f} s by its clock, {wall:.3f} s by ours")
    names = [s["name"] for s in sessions]
    if "candidate" not in names or "eager" not in names:
        return None
    eager_i, cand_i = names.index("eager"), names.index("candidate")
    eager, cand = sessions[eager_i], sessions[cand_i]
    waits = [_waited_s(marks, i) if count_waits else 0.0 for i in range(len(walls))]
    overhead_ms = _harness_ms(walls[eager_i], waits[eager_i], eager)
    implied_ms = ((walls[cand_i] - waits[cand_i]) * 1e3 / max(1, cand["calls"])) - overhead_ms
    reported_ms = cand["events_ms"] / max(1, cand["calls"])
    if implied_ms - reported_ms > IMPLIED_SLACK_SHARE * implied_ms + max(IMPLIED_SLACK_MS, overhead_ms):
        return (f"the candidate's calls took {reported_ms:.4f} ms each by the worker's timer, but "
                f"{implied_ms:.4f} ms by the search process's clock: a patched or escaped timer")
    return None


def _harness_ms(wall_s: float, waited_s: float, session: dict[str, Any]) -> float:
    """The harness's own running time a call in a session: its time between calls less the part
    of the wait that fell there. A CPU call's time is its wall, waits inside it included, so only
    the wait's share of the time between calls is taken off (the wait spread evenly): taking it
    all off made the harness cost nothing where eager's calls had waited, and an honest kernel
    timed in a quieter moment after it a patched timer (0.07 ms a call by the worker's timer,
    0.27 by ours, with 0.2 ms of harness a call; tests/test_judge.py)."""
    between_s = max(0.0, wall_s - session["events_ms"] / 1e3)
    running_share = 1.0 - min(1.0, waited_s / wall_s) if wall_s > 0 else 1.0
    return between_s * running_share * 1e3 / max(1, session["calls"])


def _waited_s(marks: list[Any], session: int) -> float:
    """Seconds the worker's main thread waited for a core during a session (stamped with the marks;
    0 for marks stamped without it)."""
    start, end = marks[2 * session], marks[2 * session + 1]
    return max(0.0, end[2] - start[2]) if len(start) > 2 and len(end) > 2 else 0.0


def busy_machine(result: dict[str, Any]) -> str | None:
    """Why the worker's timing cannot be believed although it is no cheat, if so: its calls took
    longer by this process's clock than by its own only while it waited for a core (another
    process had it). Such a timing says nothing of the candidate's speed either way."""
    if host_clock_disagrees(result) is not None:
        return None
    naive = host_clock_disagrees(result, count_waits=False)
    if naive is None:
        return None
    names = [s["name"] for s in result["sessions"]]
    waited_ms = _waited_s(result["host_marks"], names.index("candidate")) * 1e3
    return f"the machine was busy: {naive.split(': a patched')[0]}, of which the worker waited {waited_ms:.0f} ms for a core"


def scans_off() -> bool:
    """KERNFORGE_SCANS=off skips the static and object scans, to measure what the runtime
    defences catch on their own (bench/h200_issue15.sh). Never for a search you will trust."""
    return os.environ.get("KERNFORGE_SCANS") == "off"


def static_findings(task_path: Path, source: Path, backend: str) -> list[Finding]:
    if scans_off():
        return []
    task = load_task(task_path)
    dtype = task.tensor_args[0]["dtype"] if task.tensor_args else "torch.float32"
    return get_backend(backend).scan(source.read_text(errors="replace"), dtype)


def memory_limit_bytes(reference_path: Path) -> int:
    """What a CPU worker may allocate beyond what it holds when its job starts (worker.limit_memory):
    6 GiB, or 8x the task's reference data if more, and never over three quarters of the machine's
    memory. An eager session of a VAE's 8 MB add + div (two inputs, 1x32x256x256 float32) grew the
    worker's data by 1.6-2.7 GB on a 2-core CPU (glibc's heap, blocks of 8-32 MB freed and taken
    again), over the 0.8 GB a forked worker starts with: under a 4 GiB cap that counted both,
    eager itself ran out of memory (bench/results/cpu/issue34/README.md)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    wanted = max(6 << 30, 8 * (reference_path.stat().st_size if reference_path.exists() else 0))
    return min(wanted, total * 3 // 4)


def _pythonpath() -> str:
    """The worker imports kernforge from wherever this process did (installed or src/)."""
    root = str(Path(kernforge.__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH", "")
    return root + (os.pathsep + rest if rest else "")


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
