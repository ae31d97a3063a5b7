"""Kernels that leave outputs unwritten where the prefill happens to be the right answer (issue 33):
through the real pipeline (C on the cpu backend), each is rejected with the elements it never
wrote, and honest kernels of the same ops are accepted. Softmax: the tiny model's task, whose
fresh-edges set has NaN rows; argmax: an int64 output."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import c_softmax_source

from kernforge.backends.cpu import C_PRELUDE
from kernforge.capture import capture_model
from kernforge.evaluate import evaluate_baseline, evaluate_candidate
from kernforge.models import load_model
from kernforge.tasks import make_tasks, save_task

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("prefill")]

NEVER_WRITTEN = "elements never written (they still hold the prefill"

# Softmax rows holding a NaN or +inf are NaN throughout: this kernel leaves them as it found
# them, betting on a NaN prefill (which a fixed NaN prefill let pass; in a model it is garbage).
SKIPS_NAN_ROWS = """\
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        int nan_row = 0;
        for (int64_t c = 0; c < cols; ++c) nan_row |= (xr[c] != xr[c]) || (xr[c] == INFINITY);
        if (nan_row) continue;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) { yr[c] = expf(xr[c] - m); s += yr[c]; }
        for (int64_t c = 0; c < cols; ++c) yr[c] /= s;
    }
"""

# Guesses that an input of -inf gives an exact 0 and skips writing it.
SKIPS_GUESSED_ZEROS = """\
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) s += expf(xr[c] - m);
        for (int64_t c = 0; c < cols; ++c) if (xr[c] != -INFINITY) yr[c] = expf(xr[c] - m) / s;
    }
"""

# Right everywhere but the last three elements of the output.
LEAVES_A_TAIL = """\
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) s += expf(xr[c] - m);
        int64_t end = r + 1 == rows ? cols - 3 : cols;
        for (int64_t c = 0; c < end; ++c) yr[c] = expf(xr[c] - m) / s;
    }
"""


@pytest.mark.parametrize("body, where", [(SKIPS_NAN_ROWS, "on fresh-edges:"), (SKIPS_GUESSED_ZEROS, "on fresh-edges:"),
                                         (LEAVES_A_TAIL, "on real0:")],
                         ids=["skips-nan-rows", "skips-guessed-zeros", "leaves-a-tail"])
def test_a_softmax_that_leaves_elements_unwritten_is_rejected_as_never_written(body, where, evaluate_source):
    result = evaluate_source(c_softmax_source(body))
    assert result.status == "wrong_result", result.reason
    assert result.reason.startswith(where), result.reason
    assert NEVER_WRITTEN in result.reason, result.reason
    if body is LEAVES_A_TAIL:
        assert "output 0: 3 of " in result.reason, result.reason


def test_an_honest_softmax_is_accepted(evaluate_source):
    result = evaluate_source(c_softmax_source())
    assert result.status == "ok", result.reason


# ---------------------------------------------------------------- an integer output: argmax

ARGMAX_MODEL = """\
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        return torch.argmax(x * 2.0, dim=-1)


def get_inputs():
    return [torch.randn(3, 20, 37)]


def get_init_inputs():
    return []
"""

ARGMAX_C = C_PRELUDE + """
int kf_forward(const kf_tensor *in, int n_in, kf_tensor *out, int n_out) {
    if (n_in != 1 || n_out != 1 || in[0].dtype != KF_F32 || out[0].dtype != KF_I64) return 1;
    int64_t cols = in[0].sizes[in[0].ndim - 1];
    int64_t rows = 1;
    for (int64_t d = 0; d + 1 < in[0].ndim; ++d) rows *= in[0].sizes[d];
    const float *x = (const float *)in[0].data;
    int64_t *y = (int64_t *)out[0].data;
    for (int64_t r = 0; r < rows - SKIPPED_ROWS; ++r) {
        const float *xr = x + r * cols;
        int64_t best = 0;
        for (int64_t c = 1; c < cols && xr[best] == xr[best]; ++c)  /* the first NaN wins */
            if (xr[c] != xr[c] || xr[c] > xr[best]) best = c;
        y[r] = best;
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def argmax_reference(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("argmax")
    model = folder / "argmax_model.py"
    model.write_text(ARGMAX_MODEL)
    capture = capture_model(load_model(str(model), torch.device("cpu")), folder / "capture", repeats=1)
    only_argmax = lambda t: None if t.op == "aten::argmax.default" else "not argmax"
    (task,), _ = make_tasks(capture, folder / "capture", top_k=1, why_unsupported=only_argmax)
    task_path, reference_path = folder / "task.json", folder / "reference.pt"
    save_task(task, task_path)
    evaluate_baseline(task_path, reference_path, "cpu", folder / "baseline", timeout_s=300)
    return task_path, reference_path


@pytest.mark.parametrize("skipped_rows", [0, 1])
def test_an_argmax_that_leaves_an_index_unwritten_is_rejected(skipped_rows, argmax_reference, tmp_path: Path):
    task_path, reference_path = argmax_reference
    source = tmp_path / "argmax.c"
    source.write_text(ARGMAX_C.replace("SKIPPED_ROWS", str(skipped_rows)))
    result = evaluate_candidate(task_path, reference_path, source, "cpu", "cpu", tmp_path / "job", timeout_s=120)
    if skipped_rows == 0:
        assert result.status == "ok", result.reason
        return
    assert result.status == "wrong_result", result.reason
    assert "output 0: 1 of 60 " + NEVER_WRITTEN in result.reason, result.reason
