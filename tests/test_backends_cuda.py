"""kernforge.backends.cuda: nvcc builds for the GPU's architecture; build errors are data.

Only building is checked here (no GPU on this machine); running CUDA candidates is
covered on the H200 by bench/h200_evaluator.sh.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernforge.backends import BuildError, get_backend
from kernforge.backends.native import C_PRELUDE, compile_library

pytestmark = [pytest.mark.integration, pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")]

SCALE = C_PRELUDE + r"""
__global__ void scale(const float *x, float *y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
extern "C" int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    int64_t n = 1;
    for (int d = 0; d < in[0].ndim; ++d) n *= in[0].sizes[d];
    scale<<<(n + 255) / 256, 256>>>((const float *)in[0].data, (float *)out[0].data, n);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
"""


def test_cuda_backend_is_registered_and_needs_a_gpu_here():
    backend = get_backend("cuda")
    assert backend.source_suffix == ".cu"
    assert "needs an NVIDIA GPU" in backend.unavailable_reason()


def test_nvcc_builds_for_sm90_and_caches(tmp_path: Path):
    from kernforge.backends.cuda import NVCC_FLAGS, gpu_arch

    source = tmp_path / "scale.cu"
    source.write_text(SCALE)
    command = ["nvcc", f"-arch={gpu_arch()}", *NVCC_FLAGS]
    assert gpu_arch() == "sm_90"  # no GPU visible: the H200's architecture
    library = compile_library(source, tmp_path / "build", command, "nvcc-test")
    assert library.exists() and library.suffix == ".so"
    mtime = library.stat().st_mtime_ns
    assert compile_library(source, tmp_path / "build", command, "nvcc-test") == library
    assert library.stat().st_mtime_ns == mtime  # a cache hit, not a rebuild


def test_nvcc_error_is_returned_as_data(tmp_path: Path):
    from kernforge.backends.cuda import NVCC_FLAGS

    source = tmp_path / "broken.cu"
    source.write_text(SCALE.replace("2.0f * x[i]", "2.0f * undefined_name[i]"))
    with pytest.raises(BuildError, match="undefined_name"):
        compile_library(source, tmp_path / "build", ["nvcc", "-arch=sm_90", *NVCC_FLAGS], "nvcc-test")
