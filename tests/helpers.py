"""Constants and helpers shared by the tests (fixtures are in conftest.py)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
TINY_MODEL = TESTS_DIR / "models" / "tiny_softmax.py"
SOFTMAX_OP = "aten::_softmax.default"


# A correct softmax over the last dim for contiguous float32 inputs of any shape,
# written against the cpu backend's contract; BODY is what varies between tests.
C_SOFTMAX_TEMPLATE = """\
#include <math.h>
#include <stddef.h>
{prelude}
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {{
    if (n_in != 1 || n_out != 1) return 1;
    if (in[0].dtype != KF_F32 || out[0].dtype != KF_F32) return 2;
    int64_t cols = in[0].sizes[in[0].ndim - 1];
    int64_t rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
{body}
    return 0;
}}
"""

CORRECT_BODY = """\
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
        for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
    }
"""


def c_softmax_source(body: str = CORRECT_BODY) -> str:
    from kernforge.backends.cpu import C_PRELUDE

    return C_SOFTMAX_TEMPLATE.format(prelude=C_PRELUDE, body=body)


def copy_run_folder(run_dir: Path, folder: Path) -> Path:
    """A copy of a run folder at folder/<its name>, its database copied whole through SQLite's
    backup (run.db's WAL can be checkpointed and deleted while the folder is walked: the last
    connection to close does it), and a file that goes away while it is copied left out (a killed
    search's workers live on, in sessions of their own, and finish their nodes)."""
    def copy_if_there(src: str, dst: str) -> None:
        try:
            shutil.copy2(src, dst)
        except FileNotFoundError:
            pass

    target = folder / run_dir.name
    shutil.copytree(run_dir, target, ignore=shutil.ignore_patterns("run.db", "run.db-wal", "run.db-shm"),
                    copy_function=copy_if_there)
    if (run_dir / "run.db").exists():
        source, copy = sqlite3.connect(run_dir / "run.db"), sqlite3.connect(target / "run.db")
        try:
            source.backup(copy)
        finally:
            source.close()
            copy.close()
    return target


@dataclass
class CliResult:
    """What a command line gave: the fields of subprocess.CompletedProcess that the tests read."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


class CliTimeout(BaseException):  # not an Exception: the CLI's `except Exception` must not take it
    """run_cli's command ran past its time-out."""


def run_cli(*args: str, cwd: Path | str = REPO_ROOT, env: dict[str, str] | None = None,
            timeout: float = 300) -> CliResult:
    """`kernforge ARGS` run in this process, as `python -m kernforge ARGS` runs it: kernforge.cli.main
    with sys.argv set, its exit status from SystemExit, stdout and stderr captured apart as text
    (typer's CliRunner isolation). An exception that escapes main() is printed as Python prints
    one, exit status 1; past `timeout` seconds (SIGALRM, main thread only) CliTimeout is raised.

    What a command changes in the process is put back afterwards: os.environ (`env` applies to the
    call only; TRITON_INTERPRET is removed unless env sets it, as run_cli_subprocess does), the
    working directory (`cwd`), sys.argv, the SIGINT/SIGTERM/SIGALRM handlers, torch's and random's
    seeds, and a Ray session the command started. cli/console.py's rich consoles are made again inside the
    capture as a fresh process on pipes makes them (no terminal: 200 columns, no colour), and the
    objects the process held before the call are kept out of its garbage collections (gc.freeze),
    as a fresh process has none of them.

    run_cli_subprocess is the real entry point in a fresh process, for the few tests that need
    one: `--help`, `--version` and one one-line user error as a user's process gives them
    (test_cli, test_cli_ux: start-up and Python's own warnings included), Triton's interpreter
    (TRITON_INTERPRET set before anything imports triton: test_cli) and the Ray executor's
    `--ray-address local` (a cluster that lives as long as its process: test_executors). Ctrl-C
    (test_cli_ux.interrupt_after) and kill -9 (test_resume.start_and_kill) start their process
    with Popen, to signal it."""
    import gc
    import random
    import signal
    import traceback

    import torch
    from rich.console import Console
    from typer.testing import CliRunner

    from kernforge import cli
    from kernforge.cli import console

    argv = [str(a) for a in args]
    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    saved_consoles = console.out, console.err
    saved_rng = torch.get_rng_state(), random.getstate()
    main_thread = threading.current_thread() is threading.main_thread()
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)
    saved_handlers = {s: signal.getsignal(s) for s in signals} if main_thread else {}
    ray_before = _ray_initialized()

    def expire(signum, frame):
        raise CliTimeout(f"kernforge {' '.join(argv)} ran past {timeout} s")

    code, stdout, stderr = 0, "", ""
    # What this process held before the command is left out of its garbage collections, as a fresh
    # process would not have it: the capture's replays call gc.collect() once per signature, and
    # over the test session's heap that made `kernforge profile` of the tiny model 18 s, not 2 s.
    gc.freeze()
    try:
        os.environ.pop("TRITON_INTERPRET", None)
        os.environ.update(env or {})
        os.chdir(cwd)
        sys.argv = ["kernforge", *argv]
        with CliRunner().isolation() as (out, err, _):
            # as cli/console.py makes them at import, here on the captured (non-terminal) streams
            console.out = Console(width=None if sys.stdout.isatty() else 200)
            console.err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
            if main_thread:
                signal.signal(signal.SIGALRM, expire)
                signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                cli.main()
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if e.code is not None and not isinstance(e.code, int):
                    print(e.code, file=sys.stderr)
            except Exception:  # noqa: BLE001 - what the interpreter does with an uncaught one
                traceback.print_exc()
                code = 1
            finally:
                if main_thread:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                sys.stdout.flush()
                sys.stderr.flush()
                stdout = out.getvalue().decode("utf-8", "replace")
                stderr = err.getvalue().decode("utf-8", "replace")
    finally:
        console.out, console.err = saved_consoles
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for s, handler in saved_handlers.items():
            signal.signal(s, handler)
        torch.set_rng_state(saved_rng[0])
        random.setstate(saved_rng[1])
        if not ray_before and _ray_initialized():
            sys.modules["ray"].shutdown()
        gc.unfreeze()
    return CliResult(argv, code, stdout, stderr)


def _ray_initialized() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def run_cli_subprocess(*args: str, cwd: Path | str = REPO_ROOT, env: dict[str, str] | None = None,
                       timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m kernforge ARGS` in a fresh process, output captured as text: the entry point as a
    user runs it. Only for what needs a process of its own (see run_cli); run_cli otherwise.

    TRITON_INTERPRET is removed from the environment unless env sets it.
    """
    full_env = dict(os.environ)
    full_env.pop("TRITON_INTERPRET", None)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "kernforge", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def scripted_context(propose, evaluate_one, iterations: int, parallel: int = 1, previous=None,
                     duration=lambda proposal: 1.0):
    """A SearchContext over scripted results: evaluate_one(proposal, parent, decide) -> Node.
    On a simulated clock each started candidate takes duration(proposal) and the earliest to
    finish is evaluated next (ties: the first started). Records, each time the strategy waits,
    how many candidates were running (`ctx.running_at_wait`), and for each node when it started
    and finished (`ctx.spans`, by node id)."""
    import heapq

    from kernforge.records.proposal import NoProposal
    from kernforge.search import SearchContext

    clock = {"now": 0.0}
    queue: list = []

    def start(parent, decide, proposal):
        handle = len(ctx.started)
        ctx.started.append(clock["now"])
        heapq.heappush(queue, (clock["now"] + duration(proposal), handle, proposal, parent, decide))
        return handle

    def wait_any():
        ctx.running_at_wait.append(len(queue))
        finished, handle, proposal, parent, decide = heapq.heappop(queue)
        clock["now"] = finished
        node = evaluate_one(proposal, parent, decide)
        ctx.spans[node.node_id] = (ctx.started[handle], finished)
        return handle, node

    def ask(parent):  # a scripted proposer's None: nothing left
        return propose(parent) or NoProposal("scripted: nothing left", "exhausted")

    previous = list(previous or [])
    ctx = SearchContext(task=None, iterations=iterations, propose=ask, start=start, wait_any=wait_any,
                        parallel=parallel, previous=previous, evaluated=len(previous))
    ctx.started, ctx.running_at_wait, ctx.spans = [], [], {}
    return ctx
