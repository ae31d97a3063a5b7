"""kernforge builtin: softmax over the last dim, one row per program, read in blocks.

kf-op: aten::_softmax.default

Each lane keeps a running max and sum over the row's blocks, merged at the end: two reads
of x and one write of y, for rows of any length.
"""
import torch
import triton
import triton.language as tl

# kf-constants: begin
BLOCK_N = 4096
NUM_WARPS = 8
LOG = False
# kf-constants: end


@triton.jit
def softmax_online(X, Y, n_cols, BLOCK_N: tl.constexpr, LOG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row, y_row = X + row * n_cols, Y + row * n_cols
    m = tl.full([BLOCK_N], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        # NaN kept: a lane whose first value is NaN would otherwise stay at -inf, and its NaN
        # would be dropped with it (eager's row is all NaN)
        m_new = tl.maximum(m, x, propagate_nan=tl.PropagateNan.ALL)
        alive = m_new != -float("inf")
        s = tl.where(alive, s * tl.exp(m - m_new) + tl.exp(x - m_new), 0.0)
        m = m_new
    m_row = tl.max(m, axis=0)
    s_row = tl.sum(tl.where(m != -float("inf"), s * tl.exp(m - m_row), 0.0), axis=0)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        if LOG:
            y = (x - m_row) - tl.log(s_row)
        else:
            y = tl.exp(x - m_row) / s_row
        tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=cols < n_cols)


def kf_forward(x, dim, half_to_float):
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    y = torch.empty_like(x)
    softmax_online[(n_rows,)](x, y, n_cols, BLOCK_N=BLOCK_N, LOG=LOG, num_warps=NUM_WARPS)
    return y
