"""Ctrl-C in each phase of `kernforge optimize`: exit 130, one line naming the command that
continues the run (or saying that there is none), no traceback from the search nor its workers,
and the resumed run finishes with nothing that had finished lost or done again.

Each process is signalled once its phase_start event is in events.jsonl (the load phase, before
the run folder, once the model's forward has begun): no sleep decides when. The model sleeps in
its forward (tests/models/tiny_softmax_slow.py) so that the phases that run it last seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import REPO_ROOT, run_cli

from kernforge.store.db import RunDB

pytestmark = pytest.mark.integration

SLOW_MODEL = str((REPO_ROOT / "tests" / "models" / "tiny_softmax_slow.py").relative_to(REPO_ROOT))
# one candidate, none timed again: the cheapest run that goes through every phase, apply included
ARGS = ("--backend", "cpu", "--iterations", "1", "--finalists", "0", "--ops", "_softmax", "--json")
NO_FOLDER = "interrupted before the run folder was made: nothing to resume"


def start(args: list[str], forward_s: float, mark: Path | None = None) -> subprocess.Popen:
    """`python -m kernforge ARGS` in a process group of its own, with SIGINT's default action (as
    from a shell on a terminal; see test_cli_ux.interrupt_after), the model sleeping `forward_s`
    a forward."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(KF_SLOW_FORWARD_S=str(forward_s), **({"KF_FORWARD_MARK": str(mark)} if mark else {}))
    return subprocess.Popen([sys.executable, "-m", "kernforge", *args], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def ctrl_c_when(proc: subprocess.Popen, ready: Callable[[], bool], what: str) -> subprocess.CompletedProcess:
    """SIGINT to the process group (as a terminal's Ctrl-C) once `ready()`; what it printed."""
    deadline = time.monotonic() + 120
    while not ready():
        assert proc.poll() is None, f"it ended before {what}: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, f"no {what} in 120 s"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [json.loads(line) for line in lines if line.endswith("}")]


def phase_began(runs_dir: Path, phase: str, after: int = 0) -> Callable[[], bool]:
    """Whether a phase_start of `phase` is among the events of the (one) run past the first `after`."""
    def ready() -> bool:
        return any(e["kind"] == "phase_start" and e["phase"] == phase
                   for run_dir in runs_dir.iterdir() for e in events(run_dir)[after:])
    return ready


def resume_command(proc: subprocess.CompletedProcess, run_dir: Path) -> list[str]:
    """The command its one line says continues the run, as arguments after `kernforge`; the
    line is the last on stderr and the only one that says it was interrupted."""
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert [line for line in lines if line.startswith("interrupted")] == lines[-1:]
    prefix = f"interrupted: {run_dir} keeps every candidate that finished; continue with: kernforge "
    assert lines[-1].startswith(prefix) and lines[-1].endswith(f"optimize --resume {run_dir}"), lines[-1]
    return lines[-1][len(prefix):].split()


def worker_tracebacks(run_dir: Path) -> list[str]:
    return [str(log) for log in run_dir.rglob("log.txt") if "Traceback" in log.read_text(errors="replace")]


def kinds(run_dir: Path, kind: str) -> int:
    return sum(e["kind"] == kind for e in events(run_dir))


def test_ctrl_c_while_the_model_loads_leaves_no_folder(tmp_path: Path):
    runs_dir, mark = tmp_path / "runs", tmp_path / "forward-began"
    proc = start(["optimize", SLOW_MODEL, *ARGS, "--runs-dir", str(runs_dir)], forward_s=2.0, mark=mark)
    done = ctrl_c_when(proc, mark.exists, "forward")
    assert done.returncode == 130, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [NO_FOLDER]
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def test_ctrl_c_in_capture_baselines_and_apply_then_resume_finishes(tmp_path: Path):
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    # capture: the folder is there, its capture is not; resume captures again and chooses the tasks
    # capture's warm-up alone runs forwards for 1 s (capture/profile.py WARMUP_S): time to be interrupted
    proc = start(["optimize", SLOW_MODEL, *ARGS, "--runs-dir", str(runs_dir)], forward_s=0.05)
    done = ctrl_c_when(proc, phase_began(runs_dir, "capture"), "capture")
    (run_dir,) = runs_dir.iterdir()
    command = resume_command(done, run_dir)
    assert not (run_dir / "capture" / "profile.json").exists() and kinds(run_dir, "captured") == 0

    # a task's baseline
    seen = len(events(run_dir))
    done = ctrl_c_when(start(command, forward_s=0.05), phase_began(runs_dir, "baselines", seen), "baselines")
    assert resume_command(done, run_dir) == command
    assert "capture did not finish" in done.stderr and "choosing them now" in done.stderr
    assert kinds(run_dir, "captured") == 1 and kinds(run_dir, "tasks") == 1
    assert len(RunDB(run_dir / "run.db").tasks()) == 1 and not RunDB(run_dir / "run.db").nodes()

    # apply, whose model load runs two slow forwards: the search is over and recorded
    seen = len(events(run_dir))
    done = ctrl_c_when(start(command, forward_s=1.0), phase_began(runs_dir, "apply", seen), "apply")
    assert resume_command(done, run_dir) == command
    searched = {n.node: n.result for n in RunDB(run_dir / "run.db").nodes()}
    assert len(searched) == 1 and kinds(run_dir, "applied") == 0

    # the resume finishes: apply runs again, nothing else does
    proc = run_cli(*command, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "is finished" in proc.stderr and "nothing left to search" in proc.stderr
    data = json.loads(proc.stdout)
    assert "error" not in data["end_to_end"] and data["tasks"][0]["candidates"] == 1
    assert {n.node: n.result for n in RunDB(run_dir / "run.db").nodes()} == searched
    assert kinds(run_dir, "captured") == 1 and kinds(run_dir, "tasks") == 1 and kinds(run_dir, "applied") == 1
    assert worker_tracebacks(run_dir) == []


def test_the_fork_server_starts_deaf_to_ctrl_c():
    # Ctrl-C reaches the whole foreground process group: a server still importing its site module
    # would die with a fatal error on the terminal (seen once in this module's resume test)
    script = ("import multiprocessing, multiprocessing.forkserver as fs\n"
              "from kernforge.evaluate import forked\n"
              "multiprocessing.get_context('forkserver').set_forkserver_preload(['torch'])  # seconds before it ignores SIGINT itself\n"
              "forked.start_server_deaf_to_ctrl_c()\n"
              "status = open(f'/proc/{fs._forkserver._forkserver_pid}/status').read()\n"
              "mine = open('/proc/self/status').read()\n"
              "mask = lambda text: int(next(l for l in text.splitlines() if l.startswith('SigIgn')).split()[1], 16)\n"
              "print(mask(status) >> 1 & 1, mask(mine) >> 1 & 1)\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # the server's SIGINT (signal 2: bit 1) ignored from its start, this process's handled as before
    assert proc.stdout.split() == ["1", "0"], proc.stdout
