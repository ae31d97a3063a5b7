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

from kernforge.backends import Backend, BuildError, Kernel, Prompt, static_scan
from kernforge.runtime.importing import FileImportError, import_path
from kernforge.runtime.loading import Loading


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


PROMPT = Prompt(
    language="Python with Triton", fence="python", fence_tags=("python", "py", "python3", "triton"),
    contract="""The file is a Python module. It defines `kf_forward(...)`, taking the op's arguments in the
order of the call below (tensors as torch tensors on the GPU, the other arguments as given), and
returns what the op returns: the same number of outputs with the same shapes, dtypes and strides.
Outputs are allocated in kf_forward (torch.empty, torch.empty_like, torch.empty_strided) and every
element is computed by your @triton.jit kernels. Launch on the current stream; do not synchronize.""",
    rules="""The file is checked before it runs, against an allow-list:
- imports: math, torch, triton, triton.language (as tl) and triton.language.extra.libdevice only;
- outside @triton.jit functions, torch is used only to allocate outputs and read metadata (shape,
  stride, dtype, device, numel; views such as .view, .reshape, .contiguous; never data_ptr): no
  torch op may compute any part of the result, and no tensor arithmetic outside kernels;
- no classes, no global or nonlocal, no dunder names, no writes to attributes, no module-level
  state except constants, kernels, and a memo of device properties;
- a scalar argument of kf_forward used in arithmetic must be wrapped in int() or float().""",
    defines=r"^\s*def\s+(\w+)\s*\(", entry=r"^\s*def\s+kf_forward\s*\(")

BACKEND = Backend(name="triton", language="triton", source_suffix=".py",
                  unavailable_reason=unavailable_reason, build=build,
                  timeable=lambda: not interpreter_wanted() and _cuda_available(),
                  scan=static_scan("triton"), loading=Loading(device="cuda", artefact="module"),
                  installed_file=lambda source, build_dir, output_meta: source, prompt=PROMPT,
                  requires=("triton",), gpu_code=True)
