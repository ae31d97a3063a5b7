"""kernforge builtin: cumsum over the last dim, one row per program in blocks with a carry.

kf-op: aten::cumsum.default

For rows too long for one tile: each block of BLOCK_N is scanned in registers and shifted by
the running total of the blocks before it (the carry). One read of x, one write of y.
Accumulated in float32 for 16-bit inputs and in float64 for float32 ones (ACC_FP64), as eager's
CPU kernel does: a float32 running sum over thousands of values strays past eager's error.
"""
import torch
import triton
import triton.language as tl

# kf-constants: begin
BLOCK_N = 1024
NUM_WARPS = 8
ACC_FP64 = True
# kf-constants: end


@triton.jit
def cumsum_blocked(X, Y, n_cols, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK_N)
    carry = tl.zeros([1], ACC)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + lanes
        mask = cols < n_cols
        x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0).to(ACC)
        y = tl.cumsum(x, axis=0) + carry
        tl.store(Y + row * n_cols + cols, y.to(Y.dtype.element_ty), mask=mask)
        carry += tl.sum(x, axis=0)


def kf_forward(x, dim, dtype=None):
    n_cols = x.shape[int(dim) % x.dim()]
    n_rows = x.numel() // n_cols
    y = torch.empty_like(x)
    cumsum_blocked[(n_rows,)](x, y, n_cols, BLOCK_N=BLOCK_N, ACC=tl.float64 if ACC_FP64 else tl.float32,
                              num_warps=NUM_WARPS)
    return y
