"""What the compiled backends (cpu: gcc, cuda: nvcc) share: the calling convention and the build cache.

A candidate defines

    int kf_forward(const kf_tensor *inputs, int n_inputs, kf_tensor *outputs, int n_outputs);

over the reference op's tensor arguments in order, and writes into outputs that
the backend allocates with the reference's shapes, dtypes and strides (on the
GPU for cuda: the pointers are device pointers, and the kernels go on the
default stream). Non-tensor arguments are fixed for a task, so the candidate
bakes them in. A non-zero return means "cannot handle these inputs" and fails
the candidate.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from kernforge.backends import BuildError, Kernel, RejectedBuild, object_scan
from kernforge.runtime.native_abi import bind_entry, call_entry, empty_like_meta

# The struct every candidate declares; kept here for the proposer's templates to include.
C_PRELUDE = """\
#include <stdint.h>
#define KF_MAX_DIMS 8
enum { KF_F32 = 0, KF_F64 = 1, KF_F16 = 2, KF_BF16 = 3, KF_I32 = 4, KF_I64 = 5, KF_U8 = 6, KF_I8 = 7 };
typedef struct {
    void *data;
    int64_t ndim;
    int64_t sizes[KF_MAX_DIMS];
    int64_t strides[KF_MAX_DIMS]; /* in elements */
    int32_t dtype;
} kf_tensor;
"""


def compile_library(source: Path, build_dir: Path, command: list[str], toolchain: str) -> Path:
    """Build `source` into a shared library in two steps: compile it to an object (`command`
    without -shared and -l flags, plus -c), check the object (kernforge.backends.object_scan),
    then link it with `command + [-o OUT, OBJECT]`. Once per (source, command, toolchain
    version, check version): a rebuild of the same text is a cache hit, and only a library that
    passed the checks is ever cached.

    Raises RejectedBuild (a BuildError) with the findings when the object fails a check, and
    BuildError with the compiler's words when it does not build. The two steps and the checks
    add ~7 ms to the built-in softmax's 85 ms single gcc call (median of 10 cold builds on a
    2-core machine): objdump and its parsing ~4.5 ms, a second gcc driver for the link the rest."""
    text = source.read_bytes()
    key = hashlib.sha256(text + " ".join(command).encode() + toolchain.encode() +
                         f"object-scan {object_scan.VERSION} {os.environ.get('KERNFORGE_SCANS', '')}".encode()
                         ).hexdigest()[:16]
    build_dir.mkdir(parents=True, exist_ok=True)
    library = build_dir / f"kf_{key}.so"
    if library.exists():
        return library
    shared = _shared_cache()
    if shared is not None and (shared / library.name).exists():
        _place(shared / library.name, library)
        return library
    missing = object_scan.missing_tool()
    if missing:
        raise BuildError(missing)
    language = "cuda" if Path(command[0]).name == "nvcc" else "c"
    with tempfile.TemporaryDirectory(dir=build_dir, prefix="kf_build_") as scratch:
        log = build_dir / "build.log"  # the compiler's words, warnings included, for a reader of the node
        log.write_text("")
        obj, ptx = _compile_object(source, command, Path(scratch), language, log)
        # KERNFORGE_SCANS=off: the runtime defences measured alone (evaluate.runner.scans_off)
        findings = [] if os.environ.get("KERNFORGE_SCANS") == "off" else object_scan.scan_object(obj, language, ptx)
        if findings:
            raise RejectedBuild(findings)
        tmp = Path(scratch) / "kf.so"
        _run([*command, "-o", str(tmp), str(obj)], log)
        tmp.replace(library)  # atomic: a half-written library is never picked up from the cache
    if shared is not None:
        _place(library, shared / library.name)
    return library


def _shared_cache() -> Path | None:
    """KERNFORGE_BUILD_CACHE: a folder of checked libraries shared by every build dir (the test
    suite's session; several searches of the same kernels), keyed as each build dir is."""
    folder = os.environ.get("KERNFORGE_BUILD_CACHE")
    if not folder:
        return None
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _place(library: Path, target: Path) -> None:
    """A copy of `library` at `target`, made whole before it appears (another process may be
    looking for it): a hard link where the two share a file system."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        os.link(library, tmp)
    except OSError:
        shutil.copyfile(library, tmp)
    tmp.replace(target)


def _compile_object(source: Path, command: list[str], scratch: Path,
                    language: str, log: Path) -> tuple[Path, list[Path]]:
    """The object file of `source` and, for nvcc, the PTX it kept of the device code."""
    # -shared and gcc's libraries are the link's (nvcc's -lineinfo is no library)
    flags = [f for f in command
             if f != "-shared" and not (language == "c" and f.startswith(("-l", "-L")))]
    obj = scratch / "kf.o"
    keep = ["--keep", "--keep-dir", str(scratch)] if language == "cuda" else []
    _run([*flags, *keep, "-c", "-o", str(obj), str(source)], log)
    ptx = sorted(scratch.glob("*.ptx"))
    if language == "cuda" and not ptx:
        raise BuildError("nvcc kept no PTX of the device code to check")
    return obj, ptx


def _run(command: list[str], log: Path) -> None:
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(command)}\n{proc.stdout}{proc.stderr}[exit {proc.returncode}]\n")
    if proc.returncode != 0:
        words = (proc.stderr or proc.stdout).strip()
        raise BuildError(words or f"{command[0]} exited with {proc.returncode}")


def load_kernel(library: Path, output_meta: list[dict[str, Any]], device: str) -> Kernel:
    """A Python callable over the library's kf_forward: allocates (prefilled) outputs, passes structs.

    `kernel.run(outputs, args, kwargs)` calls it on outputs the caller made (the evaluator
    allocates them and prefills them outside the timed span, and `kernel.new_outputs()` makes them)."""
    try:
        entry = bind_entry(library)
    except (OSError, AttributeError) as e:
        raise BuildError(f"cannot load kf_forward from the built library: {e}") from None

    def run(outputs: list[torch.Tensor], args: Any, kwargs: Any) -> Any:
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        call_entry(entry, inputs, outputs)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def new_outputs(poison: bool = True) -> list[torch.Tensor]:
        outputs = [empty_like_meta(m, device) for m in output_meta]
        if poison:
            # NaN, a sentinel or a far value, drawn per call: an element the kernel never writes
            # fails a check on some call, whatever its right answer (harness/prefill.py)
            from kernforge.harness.prefill import any_prefill

            for t in outputs:
                any_prefill(t)
        return outputs

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return run(new_outputs(), args, kwargs)

    kernel.run = run  # type: ignore[attr-defined]
    kernel.new_outputs = new_outputs  # type: ignore[attr-defined]
    kernel.library = library  # type: ignore[attr-defined]
    return kernel


def tool_version(tool: str) -> str:
    return subprocess.run([tool, "--version"], capture_output=True, text=True, check=False).stdout
