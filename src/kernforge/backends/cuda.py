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

from kernforge.backends import Backend, Kernel, Prompt, static_scan
from kernforge.backends.native import compile_library, load_kernel, tool_version
from kernforge.runtime.loading import Loading

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


def library(source: Path, build_dir: Path, output_meta: list[dict[str, Any]]) -> Path:
    return build(source, build_dir, output_meta).library  # type: ignore[attr-defined]


PROMPT = Prompt(
    language="CUDA C++", fence="cuda", fence_tags=("cuda", "cu", "cpp", "c++", "cxx", "c"),
    contract="""The file is one CUDA C++ translation unit, built with `nvcc -O3 -arch=sm_XY` for this GPU. It
declares the kf_tensor struct exactly as in the example and defines
    extern "C" int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out);
`in` holds the op's tensor arguments in order, `out` the outputs, already allocated on the GPU with
the op's shapes, dtypes and strides (data are device pointers; they hold arbitrary contents:
write every element, every call). Non-tensor arguments are fixed for this task: bake them in. Launch your
kernels on the default stream and do not synchronize; return 0 (non-zero: cannot handle this).
Declare device helpers `static __device__`: nvcc gives a non-static one a host stub that calls
exit(), which the object scan rejects.""",
    rules="""The file is checked before it runs: headers only from the C ones (stdint.h, math.h, string.h...),
cuda_runtime.h, cuda_fp16.h, cuda_bf16.h, cuda_fp8.h, cooperative_groups, mma.h, cuda_pipeline,
cuda/barrier and the cuda/std basics: never cuBLAS, cuDNN, CUTLASS, ATen or torch; no extern
declarations, no token pasting, no asm that reads a clock; the object may call only the CUDA
runtime's launch and error functions: no I/O, no host syscalls, no state that outlives a call.""",
    defines=r"^[\w\s\*<>:]*?\b(\w+)\s*\([^;{]*\)\s*\{", entry=r"\bkf_forward\s*\([^;{]*\)\s*\{")

BACKEND = Backend(name="cuda", language="cuda", source_suffix=".cu",
                  unavailable_reason=unavailable_reason, build=build, timeable=_cuda_available,
                  scan=static_scan("cuda"),
                  loading=Loading(device="cuda", artefact="library", default_stream_only=True),
                  installed_file=library, prompt=PROMPT, rebuild_command=("nvcc", "-arch={arch}", *NVCC_FLAGS),
                  gpu_code=True)
