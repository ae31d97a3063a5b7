"""A model's misaligned view is evaluated misaligned (harness/serialize.py: layout_copy keeps a
storage offset's alignment), through `kernforge eval` (workers start).

A kernel with aligned streaming loads (movntdqa) is right and fast on every fresh allocation, which
torch aligns at 64 bytes on a CPU; the model hands it `cat(...)[1:]`, 4 bytes off, where it
faults. Before, every copy and draw started at offset 0 and the kernel was accepted.
"""

from __future__ import annotations

import textwrap

import pytest

from kernforge.backends.native import C_PRELUDE
from kernforge.eval_file import EvalOptions, evaluate_file

pytestmark = pytest.mark.integration

MODEL = textwrap.dedent("""\
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            flat = torch.cat([x.new_zeros(1), x.flatten()])
            return torch.sigmoid(flat[1:].view(x.shape))  # contiguous, storage offset 1

    def get_inputs():
        return [torch.randn(16, 64)]

    def get_init_inputs():
        return []
    """)

# sigmoid of a contiguous input, four lanes at a time with streaming loads (16-byte aligned only)
C_SIGMOID_ALIGNED_LOADS = C_PRELUDE + """\
#include <math.h>
#include <immintrin.h>
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (in[0].ndim != 2 || in[0].dtype != KF_F32 || in[0].strides[1] != 1) return 1;
    int64_t n = in[0].sizes[0] * in[0].sizes[1];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    float lanes[4];
    for (int64_t i = 0; i + 4 <= n; i += 4) {
        /* a streaming (non-temporal) load: movntdqa, which needs 16-byte aligned memory */
        _mm_storeu_si128((__m128i *)lanes, _mm_stream_load_si128((__m128i *)(x + i)));
        for (int k = 0; k < 4; ++k) y[i + k] = 1.0f / (1.0f + expf(-lanes[k]));
    }
    for (int64_t i = n - n % 4; i < n; ++i) y[i] = 1.0f / (1.0f + expf(-x[i]));
    return 0;
}
"""

C_SIGMOID_UNALIGNED_LOADS = C_SIGMOID_ALIGNED_LOADS.replace("_mm_stream_load_si128((__m128i *)(x + i))",
                                                             "_mm_loadu_si128((const __m128i *)(x + i))")


def _evaluate(write_model, runs_dir, tmp_path, kernel: str) -> dict:
    spec = write_model("model", MODEL)
    kernel_file = tmp_path / "kernel.c"
    kernel_file.write_text(kernel)
    return evaluate_file(EvalOptions(spec=str(spec), kernel_file=kernel_file, backend="cpu",
                                     op="aten::sigmoid.default", runs_dir=runs_dir))["result"]


def test_a_kernel_assuming_alignment_meets_the_models_misaligned_view(write_model, runs_dir, tmp_path):
    result = _evaluate(write_model, runs_dir, tmp_path, C_SIGMOID_ALIGNED_LOADS)
    assert result["status"] not in ("ok",), result["reason"]
    assert result["status"] in ("crash", "runtime_error"), result["status"] + result["reason"]


def test_the_same_kernel_with_unaligned_loads_is_accepted(write_model, runs_dir, tmp_path):
    result = _evaluate(write_model, runs_dir, tmp_path, C_SIGMOID_UNALIGNED_LOADS)
    assert result["status"] == "ok", result["reason"] + result["log_tail"]
