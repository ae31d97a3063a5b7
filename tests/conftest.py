"""Shared fixtures: model files, run folders, and one captured softmax task with its baseline.

The expensive pieces (a capture of tests/models/tiny_softmax.py, the baseline worker
that computes its float64 oracle) are made once per session and shared read-only.

Tests that start processes (a baseline or candidate worker, a search, the CLI, the Triton
interpreter's checks) are marked `workers` here, by what they and their fixtures call, so that
the rest runs while you work in a fifth of the time (10 of about 50 min on a 2-core machine):
    .venv/bin/python -m pytest -m "not workers"
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import shutil
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import SOFTMAX_OP, TINY_MODEL

from kernforge.capture import capture_model
from kernforge.evaluate import evaluate_baseline, evaluate_candidate
from kernforge.models import load_model
from kernforge.propose import get_proposer
from kernforge.store import RunStore
from kernforge.tasks import make_tasks, save_task


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    path = tmp_path / "runs"
    path.mkdir()
    return path


@pytest.fixture
def write_model(tmp_path: Path) -> Callable[[str, str], Path]:
    """write_model(name, source) -> path of tmp_path/name.py holding the dedented source."""

    def write(name: str, source: str) -> Path:
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        return path

    return write


@pytest.fixture(scope="session")
def softmax_capture(tmp_path_factory: pytest.TempPathFactory):
    """The tiny model captured into a run folder; its softmax task for the cpu backend."""
    torch.manual_seed(0)
    runs = tmp_path_factory.mktemp("session-runs")
    loaded = load_model(str(TINY_MODEL), torch.device("cpu"))
    store = RunStore.create(runs, loaded.name)
    capture = capture_model(loaded, store.capture_dir, repeats=1)
    proposer = get_proposer("builtin")
    tasks, skipped = make_tasks(capture, store.capture_dir, top_k=1,
                                why_unsupported=lambda t: proposer.why_unsupported(t, "cpu"))
    assert [t.op for t in tasks] == [SOFTMAX_OP], (tasks, skipped)
    return store, capture, tasks[0]


@pytest.fixture(scope="session")
def softmax_task(softmax_capture):
    return softmax_capture[2]


@pytest.fixture(scope="session")
def drawn_softmax_task(tmp_path_factory: pytest.TempPathFactory):
    """The tiny model's softmax captured under a 1 KB sample cap (its input is 12.8 KB): a task
    whose sample holds placeholders only, its inputs drawn by the baseline."""
    folder = tmp_path_factory.mktemp("drawn-softmax-capture")
    loaded = load_model(str(TINY_MODEL), torch.device("cpu"))
    capture = capture_model(loaded, folder, repeats=1, sample_cap_bytes=1024)
    only_softmax = lambda t: None if t.op == SOFTMAX_OP else "not the softmax"  # noqa: E731
    (task,), _ = make_tasks(capture, folder, top_k=1, why_unsupported=only_softmax)
    return task


@pytest.fixture(scope="session")
def softmax_reference(softmax_task, tmp_path_factory: pytest.TempPathFactory):
    """(task_path, reference_path, baseline): the oracle for candidates evaluated directly.

    Kept outside any RunStore task folder: search_task deletes its task's reference.pt.
    """
    folder = tmp_path_factory.mktemp("softmax-reference")
    task_path = folder / "task.json"
    reference_path = folder / "reference.pt"
    save_task(softmax_task, task_path)
    baseline = evaluate_baseline(task_path, reference_path, "cpu", folder / "baseline",
                                 timeout_s=300)
    return task_path, reference_path, baseline


@pytest.fixture
def evaluate_source(softmax_reference, tmp_path: Path):
    """evaluate_source(text, backend='cpu', timeout_s=120) -> EvalResult for the softmax task."""
    task_path, reference_path, _ = softmax_reference

    def run(text: str, backend: str = "cpu", timeout_s: float = 120.0, suffix: str = ".c"):
        source = tmp_path / f"candidate{suffix}"
        source.write_text(text)
        return evaluate_candidate(task_path, reference_path, source, backend, "cpu",
                                  tmp_path / "job", timeout_s=timeout_s)

    return run


# ---------------------------------------------------------------- one finished run, shared

# The cheapest `kernforge optimize` of the tiny model that leaves what every consumer reads: a
# finished softmax task with two correct candidates (the first confirmed as a finalist), applied
# (a winner, where the search found one, is installed and measured), summary.json, and its --json.
FINISHED_RUN_ARGS = ("optimize", str(TINY_MODEL), "--backend", "cpu", "--iterations", "2", "--finalists", "1",
                     "--json")  # the default --top-k 2: the one op with a template, the next ones listed as skipped


@dataclass(frozen=True)
class FinishedRun:
    """The session's one finished run: `runs` holds it alone; stdout, stderr and returncode are
    what `kernforge FINISHED_RUN_ARGS` printed and exited with. Read it, never change it: a test
    that changes a run takes finished_run_copy or copy_to()."""

    runs: Path
    run_dir: Path
    returncode: int
    stdout: str
    stderr: str

    @property
    def data(self) -> dict:
        return json.loads(self.stdout)

    def copy_to(self, folder: Path, applied: bool = True) -> Path:
        """A copy of the run folder in `folder`, same name; applied=False leaves out what its apply
        recorded (integrate/, summary.json's end_to_end), as `optimize --no-apply` leaves a run.
        The copy's task still reads its samples from this run's capture (task.json and run.db keep
        their absolute paths), read-only."""
        copy = Path(shutil.copytree(self.run_dir, folder / self.run_dir.name))
        if not applied:
            shutil.rmtree(copy / "integrate", ignore_errors=True)
            summary = json.loads((copy / "summary.json").read_text())
            summary.pop("end_to_end", None)
            (copy / "summary.json").write_text(json.dumps(summary, indent=1))
            config = json.loads((copy / "config.json").read_text())
            (copy / "config.json").write_text(json.dumps({**config, "apply": False}, indent=1))
        return copy


def _build_finished_run(folder: Path) -> FinishedRun:
    from helpers import run_cli

    runs = folder / "runs"
    runs.mkdir(parents=True)
    proc = run_cli(*FINISHED_RUN_ARGS, "--runs-dir", str(runs))
    (run_dir,) = runs.iterdir() if proc.returncode == 0 else (runs,)
    return FinishedRun(runs=runs, run_dir=run_dir, returncode=proc.returncode, stdout=proc.stdout,
                       stderr=proc.stderr)


def _fingerprint(run_dir: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file of a run folder but its database's (a reader may checkpoint it)."""
    return {str(p.relative_to(run_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(run_dir.rglob("*")) if p.is_file() and not p.name.startswith("run.db")}


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory: pytest.TempPathFactory):
    """One `kernforge optimize FINISHED_RUN_ARGS` of the tiny model per session (in this process,
    through helpers.run_cli), shared read-only. Under pytest-xdist the first worker to ask builds it
    in the folder all workers' base temps share, under a file lock; the others wait and read it.
    At the end of the session the run folder must be as it was built."""
    from filelock import FileLock

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        run = _build_finished_run(tmp_path_factory.mktemp("finished-run"))
    else:
        root = tmp_path_factory.getbasetemp().parent / "finished-run"
        record = root / "finished-run.json"
        with FileLock(str(root) + ".lock"):
            if record.is_file():
                run = FinishedRun(**{k: Path(v) if k in ("runs", "run_dir") else v
                                     for k, v in json.loads(record.read_text()).items()})
            else:
                run = _build_finished_run(root)
                record.write_text(json.dumps({k: str(v) if isinstance(v, Path) else v
                                              for k, v in vars(run).items()}))
    assert run.returncode == 0, run.stderr[-3000:]
    before = _fingerprint(run.run_dir)
    yield run
    assert _fingerprint(run.run_dir) == before, "a test changed the shared finished_run: give it finished_run_copy"


@pytest.fixture
def finished_run_copy(finished_run: FinishedRun, tmp_path: Path) -> Path:
    """A copy of the shared finished run, tmp_path/runs/<its name>, for a test that changes it."""
    return finished_run.copy_to(tmp_path / "runs")


# What starts a worker process, a compiler or a browser, called by a test, by one of its
# fixtures, or by a helper function of the tests' own that they call (two calls deep).
_WORKER_CALLS = re.compile(r"\b(run_cli|search_task|evaluate_candidate|evaluate_baseline|evaluate_source|optimize|"
                           r"run_optimize|resume|apply_run|add_candidate|run_job|evaluate_file|export_run|"
                           r"softmax_reference|run_under_interpreter|subprocess\.run|subprocess\.Popen|"
                           r"check_params|check_source|compile_library|sync_playwright|capture_model)\(")
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\(")
TESTS = Path(__file__).resolve().parent


@functools.cache  # one test module's many parametrised items share their functions
def _sources(function: Callable, depth: int = 2) -> tuple[str, ...]:
    """The function's source, and those of the tests' own helpers it calls, `depth` calls deep."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return ()
    found = [source]
    if depth:
        scope = getattr(function, "__globals__", {})
        for name in set(_CALLED.findall(source)):
            helper = scope.get(name)
            if inspect.isfunction(helper) and helper is not function and _in_tests(helper):
                found += _sources(helper, depth - 1)
    return tuple(found)


def _in_tests(function: Callable) -> bool:
    try:
        return TESTS in Path(inspect.getfile(function)).resolve().parents
    except (OSError, TypeError):
        return False


def _starts_workers(item: pytest.Item) -> bool:
    functions = [getattr(item, "function", None)]
    functions += [d.func for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs]
    for function in functions:
        if function is None:
            continue
        if any(_WORKER_CALLS.search(source) for source in _sources(function)):
            return True
        try:
            if "softmax_reference" in inspect.signature(function).parameters:
                return True
        except (TypeError, ValueError):
            continue
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _starts_workers(item):
            item.add_marker(pytest.mark.workers)
