"""Shared fixtures (model files, run folders, one captured softmax task with its baseline, the
session's build cache) and the test tiers.

The expensive pieces (a capture of tests/models/tiny_softmax.py, the baseline worker
that computes its float64 oracle) are made once per session and shared read-only.

Every test module declares its tier (TIERS below); `pytest -m unit` runs the tests that start
no process, in under a minute.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import SOFTMAX_OP, TINY_MODEL, copy_run_folder

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
        copy = copy_run_folder(self.run_dir, folder)
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


# The tiers, one per test module (`pytestmark = pytest.mark.TIER`), so that a contributor picks
# what to run by what it costs: `pytest -m unit` while working, scripts/test.sh for everything.
TIERS = {
    "unit": "starts no process and builds nothing; the whole tier in under a minute",
    "integration": "starts workers, searches, the CLI, compilers or torch.compile",
    "sweep": "builds and checks the built-in kernels of every family on every backend (test_sweep.py)",
    "timing": "measures time or waits on the clock: run alone, never beside another test (scripts/test.sh)",
    "browser": "drives the dashboard in headless chromium",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sweep", action="store_true", default=False,
                     help="the exhaustive sweep: every buildable point of every family on every backend "
                          "(hours under the Triton interpreter; pick a family with -k)")


def pytest_configure(config: pytest.Config) -> None:
    for name, meaning in TIERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")
    # pytest-xdist's own, registered here too for the timing tier's run without xdist
    config.addinivalue_line("markers", "xdist_group(name): the module's tests run on one worker (--dist loadgroup)")


def module_tier(module) -> str | None:
    """The one tier a test module declares in `pytestmark`, or None."""
    marks = getattr(module, "pytestmark", [])
    names = {m.name for m in (marks if isinstance(marks, list) else [marks])} & set(TIERS)
    return names.pop() if len(names) == 1 else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if module_tier(item.module) is None:
            raise pytest.UsageError(f"{item.module.__name__}.py declares no tier, or more than one: "
                                    f"give it `pytestmark = pytest.mark.TIER`, TIER one of {', '.join(TIERS)}")
        own = {m.name for m in item.own_markers} & set(TIERS)
        if own:
            raise pytest.UsageError(f"{item.nodeid} is marked {', '.join(own)}: tiers are per module")


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder of built libraries for the whole session, shared by pytest-xdist's workers (their
    base temps sit in one folder): a source built once is a cache hit for every later test, worker
    process and search (native.compile_library's KERNFORGE_BUILD_CACHE)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder = root / "build-cache"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session", autouse=True)
def _shared_build_cache(build_cache: Path):
    before = os.environ.get("KERNFORGE_BUILD_CACHE")
    os.environ["KERNFORGE_BUILD_CACHE"] = str(build_cache)
    yield
    if before is None:
        os.environ.pop("KERNFORGE_BUILD_CACHE", None)
    else:
        os.environ["KERNFORGE_BUILD_CACHE"] = before
