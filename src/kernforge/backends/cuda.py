"""The cuda backend: CUDA C++ built by nvcc for the GPU's own architecture, called through ctypes.

The candidate is one .cu file with an `extern "C"` kf_forward (kernforge.backends.native's
convention, device pointers) that launches its kernels on the default stream. It is
built with `-arch=sm_XY` for the visible GPU (sm_90 on an H200), so that Hopper's own
instructions are available; a build error comes back as the candidate's result.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Any

from kernforge.backends import Backend, Kernel
from kernforge.backends.native import compile_library, load_kernel, tool_version

NVCC_FLAGS = ["-O3", "-shared", "-Xcompiler", "-fPIC", "-std=c++17", "-lineinfo"]
DEFAULT_ARCH = "sm_90"  # where no GPU is visible (compile-only checks): the H200's


def unavailable_reason() -> str | None:
    if shutil.which("nvcc") is None:
        return "the cuda backend needs nvcc (the CUDA toolkit) on PATH; or use --backend triton"
    if not _cuda_available():
        return "--backend cuda needs an NVIDIA GPU and none is visible; use --backend cpu"
    return None


def gpu_arch() -> str:
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}"
    return DEFAULT_ARCH


def build(source: Path, build_dir: Path, output_meta: list[dict[str, Any]]) -> Kernel:
    command = ["nvcc", f"-arch={gpu_arch()}", *NVCC_FLAGS]
    library = compile_library(source, build_dir, command, _nvcc_version())
    # A launch error surfaces at the worker's synchronize after each checked call.
    return load_kernel(library, output_meta, "cuda")


@functools.cache
def _nvcc_version() -> str:
    return tool_version("nvcc")


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


BACKEND = Backend(name="cuda", language="cuda", source_suffix=".cu",
                  unavailable_reason=unavailable_reason, build=build, timeable=_cuda_available)
