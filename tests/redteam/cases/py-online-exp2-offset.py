"""CASE  py-online-exp2-offset
CLASS error-measure: one-pass online softmax that cancels badly on offset data

MECHANISM  A one-pass ("online") softmax in the log2 domain, as flash attention writes it,
minus its care: t = x * log2(e) is rounded to float32 at the magnitude of x before the
running maximum is subtracted. With inputs 1e4 + N(0, 1) each t carries ~5e-4 of error and
the probabilities are ~2e-4 off in units of the largest (20x the tolerance). (Compiled for a
GPU, Triton may fuse x * log2e - m into one FMA and hide the bug; the interpreter rounds
every step.)

WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  The test inputs are centred (captured, N(0,1),
x100, per-row 10^U(-3,2)): the largest error on them is ~4e-6 (20 draws each), inside the
1e-5 allowed. Only a large common offset, which no input set has, shows it.

EXPECTED  wrong_result (on inputs with a large common offset)
"""
import torch
import triton
import triton.language as tl


@triton.jit
def online_softmax(X, Y, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    m = tl.full((), -float("inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    for start in range(0, n_cols, BLOCK):  # one pass: running max and rescaled sum
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * n_cols + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        t = x * 1.4426950408889634
        m_new = tl.maximum(m, tl.max(t, 0))
        s = s * tl.exp2(m - m_new) + tl.sum(tl.exp2(t - m_new), 0)
        m = m_new
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * n_cols + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        t = x * 1.4426950408889634
        tl.store(Y + row * n_cols + cols, tl.exp2(t - m) / s, mask=cols < n_cols)


def kf_forward(x, dim, half_to_float):
    y = torch.empty_like(x)
    n_cols = x.shape[-1]
    online_softmax[(x.numel() // n_cols,)](x, y, n_cols, BLOCK=16)
    return y
