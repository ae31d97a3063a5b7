"""The main job: model spec -> capture -> tasks -> search per task -> run folder and summary."""

from __future__ import annotations

import gc
import platform
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

import kernforge
from kernforge.backends import choose_backend
from kernforge.capture import Capture, OpProfile, capture_model
from kernforge.models import ModelOptions, load_model, run_forward
from kernforge.propose import get_proposer
from kernforge.search import Node, TaskOutcome, get_strategy, search_task
from kernforge.store import RunStore
from kernforge.tasks import make_tasks


@dataclass
class OptimizeOptions:
    spec: str
    backend: str = "auto"
    proposer: str = "builtin"
    strategy: str = "greedy"
    iterations: int = 10
    top_k: int = 2
    runs_dir: Path = Path("runs")
    candidate_timeout_s: float = 120.0
    model: ModelOptions = field(default_factory=ModelOptions)


@dataclass
class OptimizeResult:
    run_dir: Path
    backend: str
    device: str
    capture: Capture
    outcomes: list[TaskOutcome] = field(default_factory=list)
    skipped: list[tuple[OpProfile, str]] = field(default_factory=list)
    wall_s: float = 0.0


# Progress events: ("captured", capture), ("task_start", task, iterations),
# ("node", outcome, node), ("task_end", outcome).
OnEvent = Callable[..., None]


def optimize(opts: OptimizeOptions, on_event: OnEvent = lambda *a: None) -> OptimizeResult:
    started = time.perf_counter()
    backend = choose_backend(opts.backend, torch.cuda.is_available())
    proposer = get_proposer(opts.proposer)
    strategy = get_strategy(opts.strategy)
    device = "cuda" if backend.name in ("triton", "cuda") and torch.cuda.is_available() else "cpu"
    loaded = load_model(opts.spec, torch.device(device), opts.model)
    run_forward(loaded)  # a forward that raises is reported before a run folder is made
    store = RunStore.create(opts.runs_dir, loaded.name)
    store.write_json("config.json", _config(opts, backend.name, device, loaded.name))
    capture = capture_model(loaded, store.capture_dir)
    on_event("captured", capture)
    tasks, skipped = make_tasks(capture, store.capture_dir, opts.top_k,
                                lambda t: proposer.why_unsupported(t, backend.name))
    del loaded  # the workers need the memory, on a GPU most of all
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    result = OptimizeResult(run_dir=store.root, backend=backend.name, device=device, capture=capture,
                            skipped=skipped)
    for task in tasks:
        on_event("task_start", task, opts.iterations)
        outcome = search_task(task, store, backend, device, proposer, strategy, opts.iterations,
                              opts.candidate_timeout_s,
                              on_node=lambda o, n: on_event("node", o, n))
        result.outcomes.append(outcome)
        on_event("task_end", outcome)
    result.wall_s = time.perf_counter() - started
    store.write_json("summary.json", summary(result))
    return result


def summary(result: OptimizeResult) -> dict[str, Any]:
    return {
        "run_dir": str(result.run_dir),
        "model": result.capture.model,
        "backend": result.backend,
        "device": result.device,
        "wall_s": result.wall_s,
        "tasks": [task_row(o) for o in result.outcomes],
        "skipped": [{"op": p.op, "signature": p.signature, "share": p.share, "reason": why}
                    for p, why in result.skipped],
    }


def task_row(outcome: TaskOutcome) -> dict[str, Any]:
    """One line of the result table: the best speedup is 1.0 unless a kernel beat eager beyond noise."""
    task, best = outcome.task, outcome.best
    eager = best.result.eager if best else (outcome.baseline.eager if outcome.baseline else None)
    timed = any(n.result.timed for n in outcome.nodes)
    return {
        "task": task.task_id,
        "op": task.op,
        "shape": task.shape_text,
        "dtype": task.dtype_text,
        "share": task.share,
        "eager_p50_ms": eager.p50_ms if eager else None,
        "best_p50_ms": best.result.timing.p50_ms if best else None,
        "best_speedup_vs_eager": best.result.speedup_vs_eager if best else (1.0 if timed else None),
        "best_node": best.node_id if best else None,
        "verdict": _verdict(outcome, best, timed),
        "candidates": len(outcome.nodes),
        "correct": len(outcome.correct),
        "status_counts": outcome.status_counts(),
        "error": outcome.error,
    }


def _verdict(outcome: TaskOutcome, best: Node | None, timed: bool) -> str:
    if outcome.error:
        return f"not searched: {outcome.error}"
    if best is not None:
        return "faster kernel found"
    if not outcome.correct:
        return "no correct kernel found"
    if not timed:
        return "correct kernel found (interpreter: not timed)"
    return "no faster kernel found"


def _config(opts: OptimizeOptions, backend: str, device: str, model: str) -> dict[str, Any]:
    config = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(opts).items()}
    config.update({
        "resolved_backend": backend, "device": device, "model": model,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        "versions": _versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    })
    return config


def _versions() -> dict[str, str]:
    versions = {"kernforge": kernforge.__version__, "torch": torch.__version__,
                "python": platform.python_version()}
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        pass
    if shutil.which("gcc"):
        versions["gcc"] = subprocess.run(["gcc", "-dumpfullversion"], capture_output=True,
                                         text=True, check=False).stdout.strip()
    return versions
