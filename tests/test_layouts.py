"""Honest kernels on the layouts and ops real models have, through `kernforge eval` (workers start).

A half of `x.chunk(2, -1)` (every gated MLP) has gaps between its rows; an expanded input
has stride 0; an in-place op writes its input. Each was mishandled once: the half was
cloned contiguous before the check at reused addresses (a kernel with the signature's
strides baked in was refused), the expanded input's copy raised, and the in-place op's
oracle was computed from inputs eager had already changed, so a kernel that did nothing
passed.
"""

from __future__ import annotations

import textwrap

import pytest

from kernforge.backends.native import C_PRELUDE
from kernforge.eval_file import EvalOptions, evaluate_file

pytestmark = pytest.mark.integration

# sigmoid over a 2-D input, read through its strides (the half's row stride is 2x its width)
C_SIGMOID = C_PRELUDE + """\
#include <math.h>
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (in[0].ndim != 2 || in[0].dtype != KF_F32) return 1;
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    for (int64_t r = 0; r < in[0].sizes[0]; ++r)
        for (int64_t c = 0; c < in[0].sizes[1]; ++c)
            y[r * out[0].strides[0] + c * out[0].strides[1]] =
                1.0f / (1.0f + expf(-x[r * in[0].strides[0] + c * in[0].strides[1]]));
    return 0;
}
"""

# softmax over the last dim of a 2-D input, rows read through their stride (0 when expanded)
C_SOFTMAX_STRIDED = C_PRELUDE + """\
#include <math.h>
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (in[0].ndim != 2 || in[0].dtype != KF_F32) return 1;
    int64_t rows = in[0].sizes[0], cols = in[0].sizes[1];
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * in[0].strides[0];
        float *yr = y + r * out[0].strides[0];
        float m = -INFINITY, s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c * in[0].strides[1]]);
        for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c * in[0].strides[1]] - m); s += yr[c]; }
        for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
    }
    return 0;
}
"""

TRITON_RELU_IN_PLACE = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def relu_in_place(X, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)
    tl.store(X + offs, tl.where(x < 0.0, 0.0, x), mask=offs < n)  # NaN stays NaN, as in torch


def kf_forward(x):
    relu_in_place[(triton.cdiv(x.numel(), 256),)](x, x.numel(), BLOCK=256)
    return x
'''

TRITON_DOES_NOTHING = '''\
def kf_forward(x):
    return x  # an in-place op whose input is left as it was
'''


def evaluate(write_model, runs_dir, tmp_path, model: str, kernel: str, suffix: str, backend: str, op: str):
    spec = write_model("model", model)
    kernel_file = tmp_path / f"kernel{suffix}"
    kernel_file.write_text(kernel)
    return evaluate_file(EvalOptions(spec=str(spec), kernel_file=kernel_file, backend=backend, op=op,
                                     runs_dir=runs_dir))["result"]


def test_an_op_on_a_half_of_chunk_keeps_its_strides(write_model, runs_dir, tmp_path):
    model = textwrap.dedent("""\
        import torch

        class Model(torch.nn.Module):
            def forward(self, x):
                gate, up = x.chunk(2, -1)
                return torch.sigmoid(gate) * up

        def get_inputs():
            return [torch.randn(16, 64)]

        def get_init_inputs():
            return []
        """)
    result = evaluate(write_model, runs_dir, tmp_path, model, C_SIGMOID, ".c", "cpu", "aten::sigmoid.default")
    assert result["status"] == "ok", result["reason"] + result["log_tail"]


def test_an_expanded_input_is_captured_and_checked(write_model, runs_dir, tmp_path):
    model = textwrap.dedent("""\
        import torch

        class Model(torch.nn.Module):
            def forward(self, x):
                return torch.softmax(x, -1)

        def get_inputs():
            return [torch.randn(1, 48).expand(8, 48)]

        def get_init_inputs():
            return []
        """)
    result = evaluate(write_model, runs_dir, tmp_path, model, C_SOFTMAX_STRIDED, ".c", "cpu", "aten::_softmax.default")
    assert result["status"] == "ok", result["reason"] + result["log_tail"]


IN_PLACE_MODEL = textwrap.dedent("""\
    import torch

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.relu_(x * 2.0)

    def get_inputs():
        return [torch.randn(4, 300)]

    def get_init_inputs():
        return []
    """)


def test_an_in_place_kernel_is_judged_on_what_it_writes(write_model, runs_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # Triton on this CPU: checked, never timed
    honest = evaluate(write_model, runs_dir, tmp_path, IN_PLACE_MODEL, TRITON_RELU_IN_PLACE, ".py", "triton",
                      "aten::relu_.default")
    assert honest["status"] == "ok", honest["reason"] + honest["log_tail"]
    lazy = evaluate(write_model, runs_dir, tmp_path, IN_PLACE_MODEL, TRITON_DOES_NOTHING, ".py", "triton",
                    "aten::relu_.default")
    assert lazy["status"] == "wrong_result", lazy["reason"]
    assert "elements outside the tolerance" in lazy["reason"]
