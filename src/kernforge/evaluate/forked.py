"""CPU workers forked from one server process that has imported torch and the worker's modules.

A fresh `python -m kernforge.evaluate.worker` spends 2.2-2.7 s importing torch on a 2-core CPU
before its job starts, more than the build, checks and timing of a small candidate take
(bench/results/cpu/issue31/README.md). Forked from a server that made those imports once, a worker
starts in tens of milliseconds. Isolation is unchanged: each job is still a process of its own, in
its own process group, killed with everything it started; a fork shares nothing writable with the
server or with other jobs, and the server never holds an oracle nor loads a candidate. The server
sleeps between forks, so it takes no core from a job being timed (why runner.PrestartedWorkers
leaves CPU jobs alone).

GPU jobs keep their prestarted workers: a CUDA context cannot cross a fork, and theirs is made
ahead. The Triton interpreter is chosen per job before triton is imported, so triton is never
imported by the server.

Lifecycle: the server starts at the first CPU job (multiprocessing's forkserver, its preload
below) and ends with this process; start() forks one worker per job; run_job waits for it and
kills its group; close() (atexit) kills workers still running when this process exits.
"""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
import threading
import traceback
from typing import Any

# What every job imports before its work starts; nothing that reads a job's environment at import.
PRELOAD = ["torch", "kernforge.evaluate.worker", "kernforge.harness.session", "kernforge.harness.inputs",
           "kernforge.evaluate.checks", "kernforge.tasks", "kernforge.capture", "kernforge.backends"]


def enabled(device: str) -> bool:
    """CPU jobs are forked unless KERNFORGE_FORK_WORKERS=0 (then each starts a fresh interpreter)."""
    return device == "cpu" and os.environ.get("KERNFORGE_FORK_WORKERS", "1") != "0"


class ForkedWorker:
    """A forked worker with the part of subprocess.Popen that run_job uses: pid, wait, returncode."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self.process = process
        self.pid = process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired("forked kernforge worker", timeout or 0.0)
        return self.process.exitcode


class ForkServer:
    def __init__(self) -> None:
        self._context: Any = None
        self._live: set[ForkedWorker] = set()
        self._lock = threading.Lock()
        atexit.register(self.close)

    def ready(self) -> None:
        """The server started, once (from the main thread it starts deaf to Ctrl-C)."""
        with self._lock:
            if self._context is None:
                self._context = multiprocessing.get_context("forkserver")
                self._context.set_forkserver_preload(PRELOAD)
                start_server_deaf_to_ctrl_c()

    def start(self, job_path: str, env: dict[str, str], log_path: str, mark_fd: int) -> ForkedWorker:
        """Fork a worker for the job: its environment is `env`, its output goes to log_path, and
        mark_fd (the write end of runner.Marks' pipe, still ours to close) becomes its KF_MARK_FD."""
        self.ready()
        # The worker gets the pipe as a Connection, which multiprocessing hands over with the job
        # (SCM_RIGHTS); the duplicate here is closed once it has been sent.
        marks = multiprocessing.connection.Connection(os.dup(mark_fd), readable=False)
        try:
            process = self._context.Process(target=_run_job, args=(job_path, env, log_path, marks),
                                            name="kernforge-worker")
            process.start()
        finally:
            marks.close()
        worker = ForkedWorker(process)
        with self._lock:
            self._live = {w for w in self._live if w.poll() is None} | {worker}
        return worker

    def close(self) -> None:
        """Kill the workers still running (multiprocessing would otherwise wait for them at exit)."""
        with self._lock:
            live, self._live = self._live, set()
        for worker in live:
            if worker.poll() is None:
                kill_worker(worker)


def kill_worker(worker: Any) -> None:
    """Kill a worker's process group and reap the worker. A forked worker that has not yet made
    its own group (killed in its first milliseconds) is killed by its pid."""
    kill_group(worker.pid)
    if worker.poll() is None:
        try:
            os.kill(worker.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    worker.wait()


def kill_group(pid: int) -> None:
    """SIGKILL to the process group a worker leads (it made its own session), without reaping it."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def start_server_deaf_to_ctrl_c() -> None:
    """Start the fork server with SIGINT ignored, where this is the main thread (only it may set a
    handler; make_executor starts the server from there for a CPU run). A terminal's Ctrl-C reaches
    the whole foreground process group, the server too, which ignores it only once its imports are
    done: an interpreter interrupted while it starts dies with a fatal error on the user's
    terminal. An ignored signal stays ignored across fork and exec (a blocked one does not:
    the spawn resets the mask); the search process handles Ctrl-C and ends the server with itself."""
    if threading.current_thread() is not threading.main_thread():
        multiprocessing.forkserver.ensure_running()
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


def _run_job(job_path: str, env: dict[str, str], log_path: str,
             marks: multiprocessing.connection.Connection) -> None:
    """In the forked worker: a process group of its own, the job's environment and log, then the
    worker's main as `python -m kernforge.evaluate.worker JOB` would run it. Ctrl-C is ignored:
    it reaches the whole foreground process group, and until setsid() below this worker is in it;
    the search process handles it and ends its workers (runner.stop_workers), with no traceback
    of theirs in a log."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.setsid()
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    server_threads = os.environ.get("OMP_NUM_THREADS")
    os.environ.clear()
    os.environ.update(env)
    os.environ["KF_MARK_FD"] = str(marks.fileno())
    if env.get("OMP_NUM_THREADS") != server_threads:
        _take_the_jobs_threads(env.get("OMP_NUM_THREADS"))
    from kernforge.evaluate.worker import main

    try:
        code = main(job_path)
    except Exception:  # noqa: BLE001 - reported through the log; the runner marks the crash
        traceback.print_exc()
        code = 3
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


def _take_the_jobs_threads(value: str | None) -> None:
    """torch read OMP_NUM_THREADS when the server imported it; a job whose environment says
    otherwise gets the count it asks for, or the machine's CPU count where it asks for none (one
    thread asked for and a 2-thread pool kept: an op waited for the other core, 8.1 ms a call for
    0.23 ms of work)."""
    import torch

    threads = int(value) if value and value.isdigit() and int(value) > 0 else os.cpu_count() or 1
    torch.set_num_threads(threads)


SERVER = ForkServer()
