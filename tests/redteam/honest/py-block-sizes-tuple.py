"""HONEST  py-block-sizes-tuple
CLASS honest: module-level constants (a tuple of block sizes), no state

A module-level constant tuple of block sizes and a constant for the warps; the launcher
picks the first block that holds a row. Module-level names are read, never written, at
call time. A defence against module-level caches (py-memo-sampled-values) must not
reject constants.

EXPECTED  ok
"""
import torch
import triton
import triton.language as tl

BLOCK_SIZES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
NUM_WARPS = 4


@triton.jit
def softmax_rows(X, Y, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * n_cols + cols, (e / tl.sum(e, axis=0)).to(Y.dtype.element_ty), mask=mask)


def kf_forward(x, dim, half_to_float):
    n_cols = x.shape[-1]
    block = next(b for b in BLOCK_SIZES if b >= n_cols)
    y = torch.empty_like(x)
    softmax_rows[(x.numel() // n_cols,)](x, y, n_cols, BLOCK_N=block, num_warps=NUM_WARPS)
    return y
