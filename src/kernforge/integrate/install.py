"""A run's winners built in this process and installed into the dispatcher: kernforge.patch.

    handle = kernforge.patch(model, "runs/20261201-120000-resnet50")
    model(x)            # the proved calls run kernforge's kernels, every other call the original
    handle.remove()     # or: with kernforge.patch(model, run): ...; or kernforge.unpatch()

Routing is per ATen op and process-wide (the dispatcher is), so `model` is checked, not
wrapped: its parameters must live where the run's kernels were proved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernforge.backends import get_backend
from kernforge.errors import UserError
from kernforge.runtime import kernels, router
from kernforge.runtime.router import compile_caches_off  # noqa: F401 - apply's, with patch's one copy
from kernforge.search.runs import RunRecord, read_run


@dataclass
class Winner:
    """A task's winning kernel, as the run recorded it."""

    task_id: str
    node_id: str
    op: str
    signature: str
    args: list[Any]
    outputs: list[dict[str, Any]]
    source: Path
    backend: str
    speedup_vs_eager: float
    p50_ms: float
    eager_p50_ms: float
    share: float  # of the model's op time, as captured
    chain: dict[str, Any] | None = None  # a fused chain's steps (op is then its name), else None


def winners(run: RunRecord) -> list[Winner]:
    """Each finished task's winner (the finalist that beat eager beyond the noise), in run order."""
    found = []
    for record in run.tasks:
        node = record.winner
        if node is None:
            continue
        final, task = node.final, record.task
        found.append(Winner(task_id=task.task_id, node_id=node.node_id, op=task.op, signature=task.signature,
                            args=task.args, outputs=task.outputs, source=run.source_of(task.task_id, node),
                            backend=run.backend, speedup_vs_eager=final.speedup_vs_eager or 1.0,
                            p50_ms=final.timing.p50_ms if final.timing else 0.0,
                            eager_p50_ms=final.eager.p50_ms if final.eager else 0.0, share=task.share,
                            chain=task.chain))
    return found


def installable(winner: Winner) -> str | None:
    """None, or why this winner cannot be installed: an op that writes its inputs or returns a
    view of one is not a pure function, and a custom op must be one. (A chain is pure: its in-place
    steps write only values the chain made, capture/chains.py.)"""
    schema = None if winner.chain else kernels.resolve(winner.op)._schema
    if schema is not None and (any(a.alias_info is not None for a in schema.arguments) or any(
            r.alias_info is not None for r in schema.returns)):
        return "writes or aliases its inputs (in-place or view op): not installable as a custom op"
    if not winner.source.is_file():
        return f"its source {winner.source} is missing from the run folder"
    return None


def build_spec(winner: Winner, build_dir: Path, devices: frozenset[torch.device]) -> router.KernelSpec:
    """The winner built here as its backend installs one (Backend.installed_file: a module as it is,
    a C or CUDA file compiled with the evaluator's object checks, cached by source) and bound
    without the evaluator's wrappers."""
    backend = get_backend(winner.backend)
    path = backend.installed_file(winner.source, build_dir, winner.outputs)
    entry = router.load_entry(backend.loading, path, winner.outputs)
    return router.KernelSpec(name=router.kernel_name(winner.op, winner.source.read_bytes()),
                             op=winner.op, args=winner.args, outputs=winner.outputs,
                             backend=winner.backend, loading=backend.loading, entry=entry, devices=devices,
                             chain=winner.chain, library=path if backend.loading.artefact == "library" else None)


def devices_for(run: RunRecord) -> frozenset[torch.device]:
    """Where the run's kernels may run here: the CPU, or every visible GPU of the model it was
    proved on; a UserError where there is none."""
    if run.device == "cpu":
        return frozenset({torch.device("cpu")})
    if not torch.cuda.is_available():
        raise UserError(f"this run's kernels were proved on a GPU ({run.device_name}) and none is "
                        "visible here; apply it on a machine with that GPU")
    same = frozenset(torch.device("cuda", i) for i in range(torch.cuda.device_count())
                     if torch.cuda.get_device_name(i) == run.device_name)
    if not same:
        raise UserError(f"this run's kernels were proved on {run.device_name}, and this machine has "
                        f"{torch.cuda.get_device_name(0)}; run `kernforge optimize` here instead")
    return same


# ---------------------------------------------------------------------------- the handle

_ACTIVE: list[Patch] = []


@dataclass
class Patch:
    """Installed kernels; `remove()` (or leaving the `with` block) takes them all out."""

    run: RunRecord
    installation: router.Installation
    skipped: dict[str, str] = field(default_factory=dict)  # task -> why its winner was not installed

    @property
    def specs(self) -> list[router.KernelSpec]:
        return self.installation.specs

    @property
    def counts(self) -> dict[str, router.RouteCounts]:
        return self.installation.counts

    def remove(self) -> None:
        """Take the kernels out and release this patch's hold on the compile caches; a second
        call does nothing. (By identity: two patches of one run compare equal as dataclasses.)"""
        if not any(p is self for p in _ACTIVE):
            return
        _ACTIVE[:] = [p for p in _ACTIVE if p is not self]
        self.installation.remove()
        router.restore_compile_caches()
        router.reset_compiled_code()

    def __enter__(self) -> Patch:  # noqa: PYI034 - not subclassed
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def patch(model: torch.nn.Module | None, run: str | Path | RunRecord, only: list[str] | None = None,
          measured: bool = True, build_dir: Path | None = None) -> Patch:
    """Install the run's winners (or those of the tasks in `only`). Where the run was applied
    (`kernforge apply`), each kernel goes only where apply measured that it pays, in eager and
    under torch.compile, unless measured=False. Returns the handle; the model is not changed."""
    record = run if isinstance(run, RunRecord) else read_run(Path(run))
    devices = devices_for(record)
    if model is not None:
        _check_model_device(model, record)
    specs, skipped = [], {}
    build_dir = build_dir or record.root / "integrate" / "build"
    for winner in winners(record):
        if only is not None and winner.task_id not in only:
            continue
        why = installable(winner)
        if why:
            skipped[winner.task_id] = why
            continue
        try:
            spec = build_spec(winner, build_dir, devices)
        except Exception as e:  # noqa: BLE001 - a kernel that no longer builds is skipped, and said
            skipped[winner.task_id] = f"does not build here: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            continue
        where = placement(record, spec.name) if measured else None
        if where is not None:
            spec.in_eager, spec.under_compile = where
            if not any(where):
                skipped[winner.task_id] = "apply measured that it makes the model slower, in eager and under compile"
                continue
        specs.append(spec)
    router.disable_compile_caches()
    handle = Patch(run=record, installation=router.install(specs, model), skipped=skipped)
    _ACTIVE.append(handle)
    router.reset_compiled_code()
    return handle


def placement(run: RunRecord, kernel: str) -> tuple[bool, bool] | None:
    """(in eager, under compile) as `kernforge apply` decided for this kernel, or None where the
    run was not applied (or not with this kernel). An apply that did not compile the model
    leaves compile's choice open (True): nothing was measured against it."""
    report = run.applied
    if report is None:
        return None
    for effect in report.kernels:
        if effect.kernel == kernel:
            return effect.installed_eager, effect.installed_compile or not report.compiled
    return None


def unpatch() -> int:
    """Remove every installed patch; how many there were."""
    active = list(_ACTIVE)
    for handle in reversed(active):
        handle.remove()
    return len(active)


def _check_model_device(model: torch.nn.Module, run: RunRecord) -> None:
    if not isinstance(model, torch.nn.Module):
        raise UserError(f"kernforge.patch takes an nn.Module, not {type(model).__name__}")
    devices = {p.device.type for p in model.parameters()} | {b.device.type for b in model.buffers()}
    if devices and run.device not in devices:
        raise UserError(f"the model lives on {', '.join(sorted(devices))} and this run's kernels were "
                        f"proved on {run.device}; move the model there first (model.to('{run.device}'))")
