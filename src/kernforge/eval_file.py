"""`kernforge eval`: one hand-written kernel judged against one op of a model, in a run folder
of its own (config.json's "kind" is "eval": one task, one node, recorded like a search's).

The op's inputs come from a saved capture where one matches the model, its options, the device
and torch (a run folder's, or a `profile --save` folder's): capturing is most of an eval's time
on a large model (the tiny test model: ~8 s of an eval's ~12 s on 2 cores).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernforge.backends import choose_backend
from kernforge.capture import Capture, capture_model
from kernforge.capture.profile import load_capture
from kernforge.errors import UserError
from kernforge.models import ModelOptions, load_model, run_forward
from kernforge.records.config import RunConfig
from kernforge.store import RunStore
from kernforge.store.events import Captured, RunEnded

EVAL_KIND = "eval"  # config.json's "kind" for an eval's run folder; a search's has none
ORIGIN_FILE = "origin.json"  # what a saved capture was made from: spec, model options, device, torch
HOT_OPS_NAMED = 5  # ops an error names when the kernel names none: the top of the profile


@dataclass
class EvalOptions:
    spec: str
    kernel_file: Path
    backend: str = "auto"
    # An op ("aten::_softmax.default", or "aten::_softmax" for any overload), a signature id or a
    # profile rank;
    # empty: the file's `kf-op:` line, else an error naming the hottest ops.
    op: str = ""
    runs_dir: Path = Path("runs")
    candidate_timeout_s: float = 120.0
    model: ModelOptions = field(default_factory=ModelOptions)
    compile: str = "auto"
    # A run folder or a `profile --save` folder to take the op's inputs from; None: the newest
    # matching capture under runs_dir, else a fresh one.
    capture: Path | None = None
    recapture: bool = False  # profile the model again even where a saved capture matches


def evaluate_file(opts: EvalOptions) -> dict[str, Any]:
    """Evaluate one hand-written candidate against an op of a model: every check, timing and speedup."""
    from kernforge.evaluate import evaluate_baseline, evaluate_candidate, evaluate_peers
    from kernforge.evaluate.runner import discard_reference
    from kernforge.optimize.options import compile_modes, options_json
    from kernforge.optimize.prepare import environment, run_started
    from kernforge.tasks import save_task

    start = time.perf_counter()
    if not opts.kernel_file.is_file():
        raise UserError(f"kernel file '{opts.kernel_file}' not found; pass the path of a .c, .py or .cu file")
    compile_modes(opts.compile, "cpu")
    backend = choose_backend(opts.backend, torch.cuda.is_available())
    device = backend.device(torch.cuda.is_available())
    if opts.kernel_file.suffix != backend.source_suffix:
        raise UserError(f"the {backend.name} backend takes {backend.source_suffix} files, not "
                        f"'{opts.kernel_file.name}'; pick the backend with --backend")
    source_text = opts.kernel_file.read_text(errors="replace")
    op = opts.op or declared_op(source_text)
    key = capture_key(opts.spec, opts.model, device)
    saved = None if opts.recapture else find_capture(opts.runs_dir, key, opts.capture)
    loaded = None
    if saved is None:
        loaded = load_model(opts.spec, torch.device(device), opts.model)
        run_forward(loaded)  # a forward that raises is reported before a run folder is made
    model_name = load_capture(saved).model if saved else loaded.name
    store = RunStore.create(opts.runs_dir, model_name)
    config = {**options_json(opts), "kind": EVAL_KIND, "capture_from": str(saved) if saved else "",
              **environment(backend.name, device, model_name)}
    store.write_json("config.json", config)
    store.db  # the database from the start: a folder left by an error is read as a run with no task
    store.emit(run_started(config))
    capture = _reuse(saved, store) if saved else _capture(loaded, store, key)
    del loaded
    store.emit(Captured(signatures=len(capture.profiles), op_time_ms=capture.total_time_us / 1e3))
    task = pick_task(capture, store.capture_dir, op, opts.kernel_file)
    task_dir = store.task_dir(task.task_id)
    save_task(task, task_dir / "task.json")
    store.db.add_tasks([(task.task_id, asdict(task))])
    source = store.node_dir(task.task_id, "n0000") / f"candidate{backend.source_suffix}"
    source.write_text(opts.kernel_file.read_text())
    reference = task_dir / "reference.pt"
    try:
        baseline = evaluate_baseline(task_dir / "task.json", reference, device, task_dir / "baseline",
                                     600.0, compile_modes(opts.compile, device))
        result = evaluate_candidate(task_dir / "task.json", reference, source, backend.name,
                                    device, source.parent, opts.candidate_timeout_s)
        if result.ok and result.faster_than_eager and baseline.peers_wanted:  # only then can it decide something
            baseline.compiled, _ = evaluate_peers(task_dir / "task.json", reference, device, task_dir / "peers",
                                                  600.0, tuple(baseline.compile_modes))
    finally:
        discard_reference(reference)
    _record(store, task, baseline, result, opts.kernel_file, backend.source_suffix)
    report = {"run_dir": str(store.root), "backend": backend.name, "device": device,
              "op": task.op, "signature": task.signature, "shape": task.shape_text, "dtype": task.dtype_text,
              "share": task.share, "input_sets": baseline.labels, "eager_errors": baseline.eager_errors,
              "baseline_eager": asdict(baseline.eager) if baseline.eager else None,
              "compiled": baseline.compiled, "compile_peer": baseline.peer_state(task_done=True),
              "result": result.to_json(),
              "capture_from": str(saved) if saved else ""}
    store.write_json(f"tasks/{task.task_id}/eval.json", report)
    store.emit(RunEnded(wall_s=time.perf_counter() - start, tasks=1,
                        winners=int(result.ok and result.faster_than_eager)))
    return report


def declared_op(source: str) -> str:
    """The op a candidate says it implements, in a comment line `kf-op: aten::_softmax.default`."""
    match = re.search(r"kf-op:\s*(\S+)", source)
    return match.group(1) if match else ""


def pick_task(capture: Capture, capture_dir: Path, op: str, kernel_file: Path) -> Any:
    """The hottest task of the asked op; a UserError naming the hottest ops when none is asked
    or the model runs no such op with saved inputs."""
    from kernforge.tasks import make_tasks

    hot = ", ".join(f"{p.op} ({p.share:.1%})" for p in _hot_ops(capture))
    if not op:
        raise UserError(f"'{kernel_file.name}' names no op: add a line `kf-op: OP` to it or pass --op OP; "
                        f"the model's hottest: {hot}")
    from kernforge.optimize import asked_signatures

    try:  # optimize --ops's reading: an op with or without namespace and overload, a signature, a rank
        wanted = asked_signatures(capture, [op]) or set()
    except UserError:
        wanted = set()
    tasks, _ = make_tasks(capture, capture_dir, 1,
                          lambda task: None if task.signature in wanted else "not the asked op")
    if not tasks:
        raise UserError(f"the model runs no compute op '{op}' with saved inputs; pass --op with one of "
                        f"its hottest: {hot}")
    return tasks[0]


def _hot_ops(capture: Capture) -> list[Any]:
    """The hottest compute ops with saved inputs, one profile per op (its hottest signature)."""
    seen: dict[str, Any] = {}
    for p in capture.ranked():
        if p.samples and p.op not in seen:
            seen[p.op] = p
    return list(seen.values())[:HOT_OPS_NAMED]


# ---------------------------------------------------------------- saved captures

def capture_key(spec: str, model: ModelOptions, device: str) -> dict[str, Any]:
    """What a capture depends on: the model (a file by its absolute path and its contents' hash),
    its options, the device kind and torch's version."""
    path = Path(spec)
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
    return {"spec": str(path.resolve()) if path.is_file() else spec, "spec_sha256": digest,
            "model": asdict(model), "device": device.split(":")[0], "torch": torch.__version__}


def write_origin(capture_dir: Path, key: dict[str, Any]) -> None:
    """Beside a saved capture: what it was made from, so that `eval` can take it for this model."""
    capture_dir.mkdir(parents=True, exist_ok=True)
    (capture_dir / ORIGIN_FILE).write_text(json.dumps(key, indent=1))


def find_capture(runs_dir: Path, key: dict[str, Any], asked: Path | None) -> Path | None:
    """The capture folder (holding profile.json) to reuse: the asked one, which must match, else
    the newest matching one among the run folders; None where none matches."""
    from kernforge.store import list_runs

    if asked is not None:
        folder = asked / "capture" if (asked / "capture" / "profile.json").is_file() else asked
        if not (folder / "profile.json").is_file():
            raise UserError(f"'{asked}' holds no saved capture (profile.json); pass a run folder or a "
                            "folder that `kernforge profile --save` wrote")
        why = _mismatch(folder, key)
        if why:
            raise UserError(f"the capture in '{asked}' does not fit: {why}; drop --capture, or give the "
                            "model options it was made with")
        return folder
    for store in reversed(list_runs(runs_dir)):
        if (store.capture_dir / "profile.json").is_file() and not _mismatch(store.capture_dir, key):
            return store.capture_dir
    return None


def _mismatch(folder: Path, key: dict[str, Any]) -> str:
    """Why the capture in `folder` is not this model's ("" when it is)."""
    origin = _origin(folder)
    if origin is None:
        return "it does not say which model it was made from"
    for field_name in ("spec", "model", "device", "torch"):
        if origin.get(field_name) != key[field_name]:
            return f"it was made with {field_name} {origin.get(field_name)!r}, not {key[field_name]!r}"
    spec = Path(key["spec"])
    if origin.get("spec_sha256") is not None:  # a search's run folder keeps no hash: its file's time
        changed = origin["spec_sha256"] != key["spec_sha256"]
    else:
        changed = spec.is_file() and spec.stat().st_mtime > (folder / "profile.json").stat().st_mtime
    if changed:
        return f"'{spec}' changed after it was made (--recapture profiles it again)"
    return ""


def _origin(folder: Path) -> dict[str, Any] | None:
    """A capture's key: its origin.json, else (a search's run folder) the run's config.json."""
    try:
        if (folder / ORIGIN_FILE).is_file():
            return json.loads((folder / ORIGIN_FILE).read_text())
        config = json.loads((folder.parent / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if "spec" not in config or "model" not in config:
        return None
    settings = RunConfig.from_json(config)
    spec = Path(settings.spec)  # as typed; a relative path is taken from here
    return {"spec": str(spec.resolve()) if spec.is_file() else settings.spec, "model": settings.model,
            "device": settings.device.split(":")[0], "torch": settings.versions.get("torch")}


def _reuse(saved: Path, store: RunStore) -> Capture:
    """The saved capture in the new run folder: hard links where the file system allows (no copy
    of the samples, up to 2 GB), else copies."""
    shutil.copytree(saved, store.capture_dir, copy_function=_link_or_copy)
    return load_capture(store.capture_dir)


def _capture(loaded: Any, store: RunStore, key: dict[str, Any]) -> Capture:
    capture = capture_model(loaded, store.capture_dir)
    write_origin(store.capture_dir, key)
    return capture


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


# ---------------------------------------------------------------- the run folder's record

def _record(store: RunStore, task: Any, baseline: Any, result: Any, kernel_file: Path, suffix: str) -> None:
    """The eval as a search's one-node task: run.db, baseline.json and results.tsv, so that
    `ls`, `show`, `report` and a dashboard read it as they read a search."""
    from kernforge.records.proposal import Proposal
    from kernforge.search.nodes import row_of
    from kernforge.records.nodes import Node

    proposal = Proposal(source=kernel_file.read_text(), rationale=f"hand-written: {kernel_file.name}",
                        origin="human", params={"file": str(kernel_file)})
    node = Node(node_id="n0000", parent_id=None, proposal=proposal, result=result, kept=result.ok)
    store.write_json(f"tasks/{task.task_id}/baseline.json", baseline.to_json())
    store.write_json(f"tasks/{task.task_id}/nodes/n0000/proposal.json", {"parent": None, **proposal.record()})
    store.record_node(task.task_id, node.node_id, None, proposal, result, node.kept, suffix)
    store.append_result(row_of(task, node))
    store.db.set_task_state(task.task_id, "done")
