"""An exported package's loader: its files checked, its kernels loaded, installed and removed.

Like the rest of the runtime, this file needs only torch (and triton for Triton kernels):
`kernforge export` copies the runtime into every package (PACKAGE/runtime/), and the package's
__init__.py is a few lines over `Package(<its folder>)`.

What install() does, in order:

1. reads manifest.json, refusing a format it does not know;
2. compares every shipped file's sha256 with the manifest, refusing the first that differs
   (ChecksumError, naming the file): a changed kernel is not the kernel that was proved;
3. checks the machine against the one the kernels were proved on (the GPU's name and compute
   capability, or the CPU's name as kernforge recorded it); on another, a warning names the
   fix and nothing is installed, the model running its original ops, unless force=True;
4. loads each kernel as its backend's loading facts (in the manifest) say: a module (Triton) is
   imported; a library is loaded where it was built for this machine (a C library for this CPU
   model: gcc's -march=native makes it that CPU's code; a CUDA library for this architecture),
   else rebuilt from its source with the recorded command into the user's cache. A kernel that
   cannot be loaded is left out with a warning, and its op runs the original;
5. holds torch.compile's on-disk caches off, installs the routes (router.install) and drops
   compiled code, so the next compile sees the routes; uninstall() undoes all three.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import router

MANIFEST = "manifest.json"
# The manifest's layout; another one is refused, not misread. 2: each kernel carries its backend's
# loading facts, and its build record says what the library was built for (built_for).
MANIFEST_FORMAT = 2


class ChecksumError(RuntimeError):
    """A shipped file is missing or differs from its checksum in the manifest."""


class DeviceMismatchWarning(UserWarning):
    """This machine is not the one the kernels were proved on: nothing was installed."""


class KernelLoadWarning(UserWarning):
    """One kernel could not be loaded here: its op runs the original."""


class ModelMismatchWarning(UserWarning):
    """install() was given another model than the one the kernels were proved in: installed, and
    only its calls of the proved shapes and dtypes take them."""


# ---------------------------------------------------------------------------- the package


@dataclass
class Package:
    """An exported package's kernels; `install()` routes the model's ops to them."""

    root: Path  # the package's folder: manifest.json, kernels/, this file
    installation: router.Installation | None = None
    skipped: dict[str, str] = field(default_factory=dict)  # kernel -> why it was not installed

    @property
    def name(self) -> str:
        return self.root.name

    def manifest(self) -> dict[str, Any]:
        """manifest.json, its format checked and every shipped file's checksum verified."""
        manifest = read_manifest(self.root)
        verify_files(self.root, manifest)
        return manifest

    def install(self, model: torch.nn.Module | None = None, force: bool = False) -> router.Installation | None:
        """Route each kernel's ATen op to it where the call matches what it was proved on.
        Returns the installation (its `.counts` say where calls went), or None where nothing
        was installed (another device, or no kernel loads here: each said in a warning)."""
        manifest = self.manifest()
        devices, problem = devices_here(manifest["device"])
        if problem and not (force and devices):
            warnings.warn(f"{self.name}: {problem}; nothing installed, the model runs its original ops. "
                          f"{_device_fix(devices)}", DeviceMismatchWarning, stacklevel=2)
            return None
        if model is not None:
            check_model(model, manifest["device"]["type"])
            mismatch = model_mismatch(model, manifest)
            if mismatch:
                warnings.warn(f"{self.name}: {mismatch}", ModelMismatchWarning, stacklevel=2)
        self.uninstall()
        specs, self.skipped = self._load(manifest, devices)
        for name, why in self.skipped.items():
            warnings.warn(f"{self.name}: kernel {name} not installed, its op runs the original: {why}",
                          KernelLoadWarning, stacklevel=2)
        if not specs:
            return None
        router.disable_compile_caches()
        self.installation = router.install(specs, model)
        router.reset_compiled_code()
        return self.installation

    def uninstall(self) -> bool:
        """Remove the routes and release the compile caches; False where nothing was installed."""
        if self.installation is None:
            return False
        self.installation.remove()
        self.installation = None
        router.restore_compile_caches()
        router.reset_compiled_code()
        return True

    def _load(self, manifest: dict[str, Any],
              devices: frozenset[torch.device]) -> tuple[list[router.KernelSpec], dict[str, str]]:
        specs, skipped = [], {}
        for kernel in manifest["kernels"]:
            try:
                specs.append(load_spec(self.root, kernel, devices, self.name))
            except Exception as e:  # noqa: BLE001 - one kernel that does not load leaves the others in
                skipped[kernel["name"]] = f"{type(e).__name__}: {_first_line(e)}"
        return specs, skipped


def read_manifest(root: Path) -> dict[str, Any]:
    path = root / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ChecksumError(f"{root.name}: {MANIFEST} cannot be read ({_first_line(e)}); "
                            "export the run again (kernforge export RUN -o DIR)") from None
    version = manifest.get("format_version")
    if version != MANIFEST_FORMAT:
        raise ChecksumError(f"{root.name}: {MANIFEST} is in format {version}, this loader reads "
                            f"{MANIFEST_FORMAT}; export the run again with this kernforge")
    return manifest


def verify_files(root: Path, manifest: dict[str, Any]) -> None:
    """Raise ChecksumError naming the first shipped file that is missing or changed."""
    for relative, expected in sorted(manifest["files"].items()):
        path = root / relative
        if not path.is_file():
            raise ChecksumError(f"{root.name}: {relative} is missing (listed in {MANIFEST}); reinstall "
                                "the package or export the run again (kernforge export RUN -o DIR)")
        if sha256_of(path) != expected:
            raise ChecksumError(f"{root.name}: {relative} does not match its sha256 in {MANIFEST} (changed "
                                "after export); reinstall the package or export the run again "
                                "(kernforge export RUN -o DIR)")


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------- the machine


def devices_here(device: dict[str, Any]) -> tuple[frozenset[torch.device], str]:
    """Where the kernels may run here, and what differs from the machine they were proved on
    ("" where nothing does). With a difference, the devices are those a forced install uses."""
    if device["type"] == "cpu":
        here = cpu_name()
        problem = "" if here == device["name"] else (
            f"these kernels were proved on the CPU '{device['name']}' and this one is '{here}'")
        return frozenset({torch.device("cpu")}), problem
    if not torch.cuda.is_available():
        return frozenset(), f"these kernels were proved on {device['name']} and no GPU is visible here"
    gpus = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    same = [g for g in gpus if _same_gpu(g, device)]
    if same:
        return frozenset(same), ""
    return frozenset(gpus), (f"these kernels were proved on {_gpu_text(device['name'], device.get('arch'))} "
                             f"and this machine has {_gpu_text(torch.cuda.get_device_name(0), gpu_arch(gpus[0]))}")


def _same_gpu(gpu: torch.device, device: dict[str, Any]) -> bool:
    """The GPU model and, where the manifest knows it, the architecture the kernels were proved on."""
    return torch.cuda.get_device_name(gpu) == device["name"] and device.get("arch") in (None, gpu_arch(gpu))


def cpu_name() -> str:
    """This CPU's name as kernforge records a CPU run's device_name (kernforge.optimize)."""
    return platform.processor() or "cpu"


def cpu_model() -> str:
    """The machine type and the CPU's model name: what a library built with -march=native
    was built for. /proc/cpuinfo on Linux; elsewhere only what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{platform.machine()} {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return f"{platform.machine()} {platform.processor()}".strip()


def gpu_arch(device: torch.device) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def check_model(model: torch.nn.Module, device_type: str) -> None:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"install() takes an nn.Module (or nothing), not {type(model).__name__}")
    where = {p.device.type for p in model.parameters()} | {b.device.type for b in model.buffers()}
    if where and device_type not in where:
        raise ValueError(f"the model lives on {', '.join(sorted(where))} and these kernels were proved on "
                         f"{device_type}; move the model there first (model.to('{device_type}'))")


def model_mismatch(model: torch.nn.Module, manifest: dict[str, Any]) -> str | None:
    """Why `model` is not the one the kernels were proved in (its class or parameter count),
    or None. Installing stays safe either way: a call the guards do not know runs the original."""
    proved_class, proved_count = manifest.get("model_class", ""), manifest.get("model_parameters", 0)
    if not proved_class:  # exported before the manifest kept the model's identity
        return None
    count = sum(p.numel() for p in model.parameters())
    if type(model).__qualname__ == proved_class and count == proved_count:
        return None
    return (f"these kernels were proved in a {proved_class} of {proved_count:,} parameters, not this "
            f"{type(model).__qualname__} of {count:,}: only its calls of the proved shapes take them")


def _gpu_text(name: str, arch: str | None) -> str:
    return f"{name} ({arch})" if arch else name


def _device_fix(devices: frozenset[torch.device]) -> str:
    optimize = "Run `kernforge optimize` on this machine and export that run"
    if not devices:
        return f"Use a machine with that GPU, or: {optimize.lower()}."
    return f"{optimize}, or call install(force=True) to use these kernels where they were not proved."


# ---------------------------------------------------------------------------- kernels


def load_spec(root: Path, kernel: dict[str, Any], devices: frozenset[torch.device],
              package: str) -> router.KernelSpec:
    """One kernel of the manifest as an installable spec; raises where it cannot be loaded."""
    loading = router.Loading.from_json(kernel["loading"])  # the backend, as the runtime knows it
    path = root / kernel["source"]
    if loading.artefact == "library":
        path, devices = library_here(root, kernel, TARGETS[loading.device](devices), package)
    entry = router.load_entry(loading, path, kernel["outputs"])
    return router.KernelSpec(name=kernel["name"], op=kernel["op"], args=kernel["guard"],
                             outputs=kernel["outputs"], backend=kernel["backend"], loading=loading, entry=entry,
                             devices=devices, in_eager=kernel.get("in_eager", True),
                             under_compile=kernel.get("under_compile", True), chain=kernel.get("chain"),
                             library=path if loading.artefact == "library" else None)


def library_here(root: Path, kernel: dict[str, Any], target: tuple[str, frozenset[torch.device]],
                 package: str) -> tuple[Path, frozenset[torch.device]]:
    """The shipped library where it was built for this machine's target (TARGETS) and loads, else one
    rebuilt here with the recorded command; and the devices it may run on. A library whose target
    was not recorded (a GPU run whose architecture was unknown at export: its name matched) is tried."""
    (built_for, devices), build = target, kernel["build"]
    prebuilt = root / kernel["library"] if kernel.get("library") else None
    if prebuilt is not None and build.get("built_for") in (built_for, None) and _loads(prebuilt):
        return prebuilt, devices
    return rebuild(root / kernel["source"], build["command"], built_for, package), devices


def _cpu_target(devices: frozenset[torch.device]) -> tuple[str, frozenset[torch.device]]:
    return cpu_model(), devices


def _gpu_target(devices: frozenset[torch.device]) -> tuple[str, frozenset[torch.device]]:
    """The first GPU's architecture, and the GPUs of that architecture (a library is one arch's code)."""
    arch = gpu_arch(min(devices, key=lambda d: d.index or 0))
    return arch, frozenset(d for d in devices if gpu_arch(d) == arch)


# What a library is built for, per device type (export records it as build.built_for): gcc's
# -march=native makes code for one CPU model, nvcc's -arch for one GPU architecture.
TARGETS = {"cpu": _cpu_target, "cuda": _gpu_target}


def rebuild(source: Path, command: list[str], arch: str, package: str) -> Path:
    """`source` built with the recorded command (its "{arch}" filled in: the target, which a CPU's
    command does not name) into the user's cache,
    once per (source, command, compiler version)."""
    if shutil.which(command[0]) is None:
        raise RuntimeError(f"the shipped library does not load here and {command[0]} is not on PATH to "
                           f"rebuild it from {source.name}; install {command[0]}")
    command = [part.replace("{arch}", arch) for part in command]
    version = subprocess.run([command[0], "--version"], capture_output=True, text=True, check=False).stdout
    key = hashlib.sha256(source.read_bytes() + " ".join(command).encode() + version.encode()).hexdigest()[:16]
    cache = cache_dir(package)
    library = cache / f"{source.stem}-{key}.so"
    if library.is_file():
        return library
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix="build-") as scratch:
        built = Path(scratch) / "kf.so"
        proc = subprocess.run([*command, "-o", str(built), str(source)], capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{command[0]} failed on {source.name}: "
                               f"{_first_line((proc.stderr or proc.stdout).strip() or proc.returncode)}")
        built.replace(library)  # atomic: another process never loads a half-written library
    return library


def cache_dir(package: str) -> Path:
    """Where rebuilt libraries go: $XDG_CACHE_HOME (~/.cache by default) / the package's name."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / package


def _loads(library: Path) -> bool:
    from ctypes import CDLL

    try:
        CDLL(str(library))
    except OSError:
        return False
    return True


def _first_line(value: object) -> str:
    lines = str(value).strip().splitlines()
    return lines[0][:300] if lines else type(value).__name__
