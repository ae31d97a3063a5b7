"""Before the search: the model loaded, the run folder made, the model captured and let go."""

from __future__ import annotations

import gc
import os
import platform
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import kernforge
from kernforge.backends import Backend, choose_backend
from kernforge.capture import Capture, capture_model
from kernforge.capture.compiled import compile_ranking, compile_warning
from kernforge.models import LoadedModel, ModelOptions, load_model, run_forward
from kernforge.propose import ProposerOptions
from kernforge.records.config import RunConfig
from kernforge.store import RUN_FORMAT, RunStore
from kernforge.store.events import (Captured, PhaseStarted, PhaseTimed,
                                    RunStarted)

from kernforge.optimize.options import OnEvent


@dataclass
class Loaded:
    backend: Backend
    device: str
    model: LoadedModel
    began: float  # time.time() when loading began: the run's start


def load_for_run(spec: str, backend_name: str, model: ModelOptions, on_event: OnEvent) -> Loaded:
    """Choose the backend and device, load the model and run it once: a model that fails is
    reported, and a Ctrl-C here stopped, before a run folder is made. The load phase is told to
    `on_event` alone (the terminal's status line): there is no folder to write it to yet."""
    began = time.time()
    on_event(PhaseStarted(phase="load"))
    backend = choose_backend(backend_name, torch.cuda.is_available())
    device = backend.device(torch.cuda.is_available())
    loaded = load_model(spec, torch.device(device), model)
    run_forward(loaded)
    return Loaded(backend=backend, device=device, model=loaded, began=began)


def new_run_folder(runs_dir: Path, loaded: Loaded, config: dict[str, Any], on_event: OnEvent | None) -> RunStore:
    """The run folder, once its database and config.json are written: from then on a Ctrl-C
    leaves a folder that `optimize --resume` continues. One that comes before removes the folder,
    which holds nothing to resume from."""
    store = RunStore.create(runs_dir, loaded.model.name)
    try:
        if on_event is not None:
            store.listeners.append(on_event)
        machine = environment(loaded.backend.name, loaded.device, loaded.model.name)
        store.db.add_tasks([])  # run.db exists: resume's test of a run folder
        store.write_json("config.json", {**config, **machine})
        store.emit(run_started({**config, **machine}, began=loaded.began))
        store.emit(PhaseTimed(phase="load", seconds=time.time() - loaded.began))
    except KeyboardInterrupt:
        shutil.rmtree(store.root, ignore_errors=True)
        raise
    return store


def capture_run(store: RunStore, loaded: Loaded, rank_by: str) -> Capture:
    """The model's ops captured into the run folder (under torch.compile too where rank_by asks,
    capture/compiled.py); what an interrupted capture left there is dropped first."""
    shutil.rmtree(store.capture_dir, ignore_errors=True)
    capture = capture_model(loaded.model, store.capture_dir,
                            under_compile=compile_ranking(rank_by, loaded.device),
                            on_phase=lambda phase: store.emit(PhaseStarted(phase=phase)))
    for phase, seconds in capture.phases.items():
        store.emit(PhaseTimed(phase=phase, seconds=seconds))
    store.emit(Captured(signatures=len(capture.profiles), op_time_ms=capture.total_time_us / 1e3,
                        ranked_by="compile" if capture.ranked_by_compile else "eager",
                        warning=compile_warning(capture)))
    return capture


def release(loaded: Loaded) -> None:
    """Drop the model once captured: the workers need its memory, on a GPU most of all."""
    loaded.model = None  # type: ignore[assignment]
    gc.collect()
    if loaded.device == "cuda":
        torch.cuda.empty_cache()


def llm_label(options: ProposerOptions) -> str:
    return " ".join(part for part in (options.llm, options.llm_model) if part)


def run_started(config: dict[str, Any], resumed: bool = False, began: float = 0.0) -> RunStarted:
    """The run_start event of a run with this config.json, from this process, which began the
    run at `began` (time.time(); 0: now)."""
    settings = RunConfig.from_json(config)
    return RunStarted(began=began, model=settings.model_name, backend=settings.backend, device=settings.device,
                      device_name=settings.device_name, proposer=settings.proposer, strategy=settings.strategy,
                      iterations=settings.iterations, resumed=resumed, pid=os.getpid(), host=socket.gethostname())


def environment(backend: str, device: str, model: str) -> dict[str, Any]:
    return {
        "format_version": RUN_FORMAT,
        "resolved_backend": backend, "device": device, "model_name": model,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        # an installed or exported kernel refuses another GPU architecture than this
        "device_capability": ".".join(map(str, torch.cuda.get_device_capability())) if device == "cuda" else "",
        "versions": versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def versions() -> dict[str, str]:
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
