"""`kernforge export RUN -o DIR`: a run's winners as a standalone package that needs only torch.

    DIR/
      pyproject.toml             setuptools; depends on torch and what the backend needs (Backend.requires)
      README.md
      PACKAGE/                   default kernforge_<model>_kernels
        __init__.py              install(model=None, force=False), uninstall(), over runtime/loader.py
        runtime/                 kernforge.runtime, the folder copied whole and verbatim: router.py
                                 kernels.py fused.py dispatch.py dispatch.cpp loader.py loading.py
                                 native_abi.py importing.py
          prebuilt/dispatch-KEY/ dispatch.cpp built for the exporting torch and Python
        manifest.json            per kernel: op, schema, guard, outputs, its backend's loading
                                 facts, how its library was built, speedups; the device;
                                 the versions; a sha256 of every other file of PACKAGE/
        kernels/NAME.c + NAME.so (cpu), NAME.py (triton), NAME.cu + NAME.so (cuda)

The package runs kernforge's runtime, not a copy of its logic: kernforge.runtime's modules
import each other relatively and nothing else of kernforge, so the folder runs as it is as
PACKAGE.runtime. Native dispatch (dispatch.cpp) ships built for the torch and Python that
exported it (runtime/prebuilt/); under another torch or Python it is built where the package
is installed, against the torch there.
"""

from __future__ import annotations

import json
import keyword
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import kernforge
from kernforge import runtime
from kernforge.backends import BuildError, get_backend
from kernforge.errors import UserError
from kernforge.integrate.install import Winner, installable, placement, winners
from kernforge.runtime import dispatch, kernels, loader, router
from kernforge.search.runs import RunRecord, read_run

# Shipped whole and verbatim as PACKAGE/runtime/ (RUNTIME_FOLDER): torch-only, its modules import
# each other relatively and nothing else of kernforge (tests/test_layers.py reads that).
RUNTIME = Path(runtime.__file__).parent
RUNTIME_FOLDER = "runtime"


@dataclass
class ExportedKernel:
    name: str  # the custom op's name, kernforge::<name>
    task_id: str
    op: str
    signature: str
    speedup_vs_eager: float
    files: list[str]  # relative to the package folder


@dataclass
class ExportResult:
    package: str  # the import name
    out_dir: Path
    run: Path
    backend: str
    device: dict[str, Any]
    kernels: list[ExportedKernel] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # task -> why its winner was not exported

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "out_dir": str(self.out_dir), "run": str(self.run)}


def export_run(run_path: Path, out_dir: Path, name: str | None = None, force: bool = False) -> ExportResult:
    """Write the run's installable winners as a package in `out_dir` (new, empty, or, with
    `force`, an earlier export, which is replaced). UserError for a bad run, name or folder."""
    run = read_run(Path(run_path))
    package = name or default_name(run)
    check_name(package)
    check_destination(out_dir, force)
    found = winners(run)
    if not found:
        raise UserError(f"nothing to export: no kernel of run '{run.root.name}' beat eager beyond the noise "
                        "(see `kernforge show`); search longer, or other ops, with `kernforge optimize`")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the destination and moved into place at the end: a failed export leaves
    # neither a half-written package nor a damaged earlier one.
    staging = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}-export-"))
    try:
        result = _write_package(run, found, staging, package)
        result.out_dir = out_dir
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def default_name(run: RunRecord) -> str:
    model = re.sub(r"\W+", "_", run.settings.model_name or "model").strip("_").lower() or "model"
    return f"kernforge_{model}_kernels"


def check_name(package: str) -> None:
    if not package.isidentifier() or keyword.iskeyword(package):
        raise UserError(f"--name '{package}' is not a Python package name; use letters, digits and "
                        "underscores, not starting with a digit (e.g. my_model_kernels)")


def check_destination(out_dir: Path, force: bool) -> None:
    """A new or empty folder; with force, an earlier export too (and nothing else, so that
    --force never deletes a folder kernforge did not write)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"-o '{out_dir}' is a file; give a folder to write the package into")
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    if not force:
        raise UserError(f"-o '{out_dir}' exists and is not empty; choose a new folder, or pass --force to "
                        "replace an earlier export there")
    if not _is_export(out_dir):
        raise UserError(f"refusing to replace '{out_dir}': it is not an earlier kernforge export (no "
                        "pyproject.toml beside a PACKAGE/manifest.json); choose a new or empty folder")


def _is_export(folder: Path) -> bool:
    return (folder / "pyproject.toml").is_file() and any(
        (d / loader.MANIFEST).is_file() for d in folder.iterdir() if d.is_dir())


# ---------------------------------------------------------------------------- the package


def _write_package(run: RunRecord, found: list[Winner], root: Path, package: str) -> ExportResult:
    pkg = root / package
    (pkg / "kernels").mkdir(parents=True)
    result = ExportResult(package=package, out_dir=root, run=run.root, backend=run.backend,
                          device=device_record(run))
    entries = []
    for winner in found:
        why = installable(winner)
        where = placement(run, router.kernel_name(winner.op, winner.source.read_bytes())) if why is None else None
        if where == (False, False):
            why = "apply measured that it makes the model slower, in eager and under compile"
        if why is None:
            try:
                entry = _ship_kernel(run, winner, pkg)
                # where apply measured it pays; both where the run was not applied
                entry["in_eager"], entry["under_compile"] = where or (True, True)
                entries.append(entry)
                continue
            except (BuildError, OSError) as e:  # a compiler missing here, or its error
                why = f"does not build here: {loader._first_line(e)}"
        result.skipped[winner.task_id] = why
    if not entries:
        reasons = "; ".join(f"{task}: {why}" for task, why in result.skipped.items())
        raise UserError(f"nothing to export: none of the run's {len(found)} winning kernels can be installed "
                        f"({reasons})")
    _ship_runtime(pkg / RUNTIME_FOLDER)
    (pkg / "__init__.py").write_text(_init_source(run, package))
    manifest = _manifest(run, package, result.device, entries, pkg)
    (pkg / loader.MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    (root / "pyproject.toml").write_text(_pyproject(run, package))
    (root / "README.md").write_text(_readme(run, package, entries))
    result.kernels = [ExportedKernel(name=e["name"], task_id=e["task"], op=e["op"], signature=e["signature"],
                                     speedup_vs_eager=e["speedup_vs_eager"],
                                     files=[f for f in (e["source"], e["library"]) if f]) for e in entries]
    return result


def _ship_runtime(folder: Path) -> None:
    """kernforge.runtime copied into `folder`, its bytecode left out; dispatch.cpp is built where
    the package is installed, unless its torch and Python are this one's: then it ships built."""
    shutil.copytree(RUNTIME, folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shipped = dispatch.shippable_library()  # (the build, its path relative to dispatch.py's folder)
    if shipped is not None:
        (folder / shipped[1]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shipped[0], folder / shipped[1])


def _runtime_data() -> list[str]:
    """The runtime's files that are not modules (dispatch.cpp), and the builds shipped with it."""
    return sorted(p.name for p in RUNTIME.iterdir() if p.is_file() and p.suffix != ".py") + [
        f"{dispatch.PREBUILT}/*/*"]


def _ship_kernel(run: RunRecord, winner: Winner, pkg: Path) -> dict[str, Any]:
    """Copy one winner's source (and library) into kernels/; its manifest entry."""
    backend = get_backend(winner.backend)
    name = router.kernel_name(winner.op, winner.source.read_bytes())
    source = f"kernels/{name}{winner.source.suffix}"
    library, build = None, {}
    if backend.loading.artefact == "library":
        built, build = SHIPPED_LIBRARY[backend.loading.device](run, winner)
        library = f"kernels/{name}.so"
        shutil.copyfile(built, pkg / library)
    shutil.copyfile(winner.source, pkg / source)
    return {"name": name, "task": winner.task_id, "node": winner.node_id, "op": winner.op,
            "signature": winner.signature, "chain": winner.chain,
            "schema": chain_schema(winner) if winner.chain else str(kernels.resolve(winner.op)._schema),
            "guard": winner.args, "outputs": winner.outputs, "backend": winner.backend,
            "loading": backend.loading.to_json(), "source": source, "library": library, "build": build,
            "speedup_vs_eager": winner.speedup_vs_eager, "p50_ms": winner.p50_ms,
            "eager_p50_ms": winner.eager_p50_ms, "share": winner.share}


def chain_schema(winner: Winner) -> str:
    """A chain's 'schema', as its task reads: its name over its inputs and outputs."""
    params = ", ".join(f"Tensor in{k}" for k in range(len(winner.args)))
    return f"{winner.op}({params}) -> ({', '.join(['Tensor'] * len(winner.outputs))})"


def _cpu_library(run: RunRecord, winner: Winner) -> tuple[Path, dict[str, Any]]:
    """Built here, with the object checks, so that the CPU it was built for (-march=native)
    is known: the package uses it on that CPU model only and rebuilds it elsewhere."""
    backend = get_backend(winner.backend)
    built = backend.installed_file(winner.source, _build_dir(run), winner.outputs)
    return built, {"command": list(backend.rebuild_command), "built_for": loader.cpu_model()}


def _gpu_library(run: RunRecord, winner: Winner) -> tuple[Path, dict[str, Any]]:
    """The library the run built and proved (for its GPU's architecture); else one built
    here, where this machine has that GPU; else a BuildError."""
    backend = get_backend(winner.backend)
    build = {"command": list(backend.rebuild_command), "built_for": device_record(run)["arch"]}
    node_build = run.root / "tasks" / winner.task_id / "nodes" / winner.node_id / "build"
    proved = sorted(node_build.glob("kf_*.so"), key=lambda p: p.stat().st_mtime)
    if proved:
        return proved[-1], build
    if not _gpu_here(run.device_name):
        raise BuildError(f"the run folder keeps no library of it and this machine has no {run.device_name} "
                         "to build one for; export on that machine")
    return backend.installed_file(winner.source, _build_dir(run), winner.outputs), build


# The library a package ships, per device type of the kernel's backend (loader.TARGETS reads
# what it was built for): a CPU library is built where it is exported, a GPU one is the run's.
SHIPPED_LIBRARY = {"cpu": _cpu_library, "cuda": _gpu_library}


def _build_dir(run: RunRecord) -> Path:
    return run.root / "integrate" / "build"  # kernforge.patch's build cache: a second build is a hit


def device_record(run: RunRecord) -> dict[str, Any]:
    """The device the kernels were proved on, as the package checks it at install."""
    if run.device == "cpu":
        return {"type": "cpu", "name": run.device_name, "capability": None, "arch": None,
                "note": "a CPU run: install() checks the CPU's name as the run recorded it; a shipped C "
                        "library is used on the CPU model it was built for (build.built_on) and rebuilt "
                        "from its source with gcc elsewhere"}
    capability = run.settings.device_capability
    note = "compute capability from the run's config"
    if not capability and _gpu_here(run.device_name):
        capability = ".".join(map(str, _capability_here(run.device_name)))
        note = f"the run's config does not record the compute capability: read from this machine's {run.device_name}"
    elif not capability:
        note = (f"the run's config does not record the compute capability and no {run.device_name} is visible "
                "at export: install() checks the GPU's name only")
    arch = f"sm_{capability.replace('.', '')}" if capability else None
    return {"type": "cuda", "name": run.device_name, "capability": capability or None, "arch": arch, "note": note}


def _gpu_here(name: str) -> bool:
    return _capability_here(name) is not None


def _capability_here(name: str) -> tuple[int, int] | None:
    import torch

    if not torch.cuda.is_available():
        return None
    for i in range(torch.cuda.device_count()):
        if torch.cuda.get_device_name(i) == name:
            return torch.cuda.get_device_capability(i)
    return None


def _manifest(run: RunRecord, package: str, device: dict[str, Any], entries: list[dict[str, Any]],
              pkg: Path) -> dict[str, Any]:
    files = {p.relative_to(pkg).as_posix(): loader.sha256_of(p) for p in sorted(pkg.rglob("*"))
             if p.is_file() and p.name != loader.MANIFEST}
    profile = run.store.read_json("capture/profile.json") if (run.root / "capture" / "profile.json").is_file() else {}
    return {"format_version": loader.MANIFEST_FORMAT, "package": package,
            "model": run.settings.model_name, "run": run.root.name, "backend": run.backend,
            "model_class": profile.get("model_class", ""), "model_parameters": profile.get("model_parameters", 0),
            "exported": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "exported_by": f"kernforge {kernforge.__version__}",
            "device": device, "versions": run.settings.versions, "kernels": entries, "files": files}


# ---------------------------------------------------------------------------- generated text


def _init_source(run: RunRecord, package: str) -> str:
    needs = " and ".join(("torch", *get_backend(run.backend).requires))
    model = run.settings.model_name or "a model"
    return f'''"""Kernels kernforge searched and proved for {model} (run {run.root.name}); needs only {needs}.

    import {package}
    {package}.install(model)   # the proved calls run these kernels, every other call the original
    {package}.uninstall()      # the original ops everywhere again

On a machine other than the one the kernels were proved on, install() warns and installs
nothing unless install(force=True). What each kernel replaces, what it was proved on and how
fast it was: manifest.json. Generated by `kernforge export`; runtime/loader.py does the work.
"""

from pathlib import Path as _Path

from .runtime.loader import ChecksumError, DeviceMismatchWarning, KernelLoadWarning, ModelMismatchWarning, Package

__all__ = ["ChecksumError", "DeviceMismatchWarning", "KernelLoadWarning", "ModelMismatchWarning", "install",
           "uninstall"]

_PACKAGE = Package(_Path(__file__).resolve().parent)


def install(model=None, force=False):
    """Route the proved calls to the kernels; the installation (its .counts), or None where
    nothing was installed. ChecksumError where a shipped file was changed."""
    return _PACKAGE.install(model, force)


def uninstall():
    """Remove the kernels; False where none were installed."""
    return _PACKAGE.uninstall()
'''


def _pyproject(run: RunRecord, package: str) -> str:
    versions = run.settings.versions
    dependencies = [_at_least(name, versions.get(name)) for name in ("torch", *get_backend(run.backend).requires)]
    return f'''[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{package}"
version = "0.1.0"
description = "Kernels for {run.config.get('model_name', 'a model')} searched and proved by kernforge (run {run.root.name})"
readme = "README.md"
requires-python = ">=3.10"
dependencies = {json.dumps(dependencies)}

[tool.setuptools]
packages = ["{package}", "{package}.{RUNTIME_FOLDER}"]
# the kernel and build folders are data, listed below: not namespace packages setuptools warns of
include-package-data = false

[tool.setuptools.package-data]
{package} = ["{loader.MANIFEST}", "kernels/*"]
"{package}.{RUNTIME_FOLDER}" = {json.dumps(_runtime_data())}
'''


def _at_least(name: str, version: str | None) -> str:
    """`torch>=2.14`: the major.minor the kernels were proved with (newer ones are not known
    to break a kernel; older ones may lack the torch.library calls the runtime makes)."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return f"{name}>={match.group(1)}.{match.group(2)}" if match else name


def _readme(run: RunRecord, package: str, entries: list[dict[str, Any]]) -> str:
    rows = "\n".join(f"| {e['op']} | {e['signature']} | {e['backend']} | {e['speedup_vs_eager']:.2f}x | "
                     f"{e['p50_ms']:.4f} | {e['eager_p50_ms']:.4f} |" for e in entries)
    return f"""# {package}

Kernels that kernforge searched and proved for {run.config.get('model_name', 'a model')}
(run `{run.root.name}`, {run.backend} backend on {run.device_name}). Installs with
`pip install .`; needs only {" and ".join(("torch", *get_backend(run.backend).requires))}.

```python
import {package}
{package}.install(model)   # the proved calls run these kernels, every other call the original
{package}.uninstall()
```

| op | signature | backend | speedup vs eager | p50 ms | eager p50 ms |
|---|---|---|---|---|---|
{rows}

A call takes a kernel only where its device, dtypes, shapes, strides and other arguments are
those it was proved on; on another GPU model or architecture `install()` warns and installs
nothing unless `install(force=True)`; a file changed after export makes `install()` refuse.
Details: `{package}/manifest.json`.
"""

