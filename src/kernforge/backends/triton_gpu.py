"""The triton backend: a Python file with Triton kernels and a launcher.

The candidate defines `kf_forward(*args, **kwargs)` with the reference op's
arguments and returns its outputs. On a GPU it is built and timed; on a CPU,
with TRITON_INTERPRET=1, Triton's interpreter runs it to check correctness
only: its time says nothing of a GPU's, so it is never timed.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from kernforge.backends import Backend, BuildError, Kernel
from kernforge.importing import FileImportError, import_path


def interpreter_wanted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def unavailable_reason() -> str | None:
    if importlib.util.find_spec("triton") is None:
        return "the triton backend needs the triton package; pip install 'kernforge[triton]'"
    if _cuda_available() or interpreter_wanted():
        return None
    return ("--backend triton needs an NVIDIA GPU and none is visible; use --backend cpu, "
            "or set TRITON_INTERPRET=1 to check Triton kernels on the CPU (never timed)")


def build(source: Path, build_dir: Path, output_meta: list[dict[str, Any]]) -> Kernel:
    # Triton's own cache goes in the candidate's build folder, so that candidates don't share it.
    # (The worker process is the candidate's alone, so this changes no one else's setting.)
    os.environ["TRITON_CACHE_DIR"] = str(build_dir / "triton-cache")
    try:
        module = import_path(source, "kf_candidate")
    except FileImportError as e:  # anything the candidate raises on import is a build failure
        raise BuildError(str(e)) from None
    entry = getattr(module, "kf_forward", None)
    if not callable(entry):
        raise BuildError("the candidate defines no kf_forward(*args)")
    return entry


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


BACKEND = Backend(name="triton", language="triton", source_suffix=".py",
                  unavailable_reason=unavailable_reason, build=build,
                  timeable=lambda: not interpreter_wanted() and _cuda_available())
