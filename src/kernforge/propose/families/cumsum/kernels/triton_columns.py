"""kernforge builtin: cumsum over a dim that is not the last: columns.

kf-op: aten::cumsum.default

The input is row-major [outer, R, inner] around the dim. Each program takes BLOCK_C adjacent
columns of one slab o (contiguous in memory: the loads coalesce along inner) and walks R in
steps of BLOCK_R: each [BLOCK_R, BLOCK_C] tile is scanned down its columns and shifted by the
columns' running totals. Accumulated in float32 for 16-bit inputs and in float64 for float32
ones (ACC_FP64), as eager's CPU kernel does.
"""
import math

import torch
import triton
import triton.language as tl

# kf-constants: begin
BLOCK_R = 8
BLOCK_C = 64
NUM_WARPS = 4
ACC_FP64 = True
# kf-constants: end


@triton.jit
def cumsum_columns(X, Y, n_r, n_inner, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, ACC: tl.constexpr):
    # One grid axis (the second is limited to 65535): program p is column block p % blocks of slab p // blocks.
    blocks = tl.cdiv(n_inner, BLOCK_C)
    slab = (tl.program_id(0) // blocks).to(tl.int64)
    cols = (tl.program_id(0) % blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    steps = tl.arange(0, BLOCK_R)
    carry = tl.zeros([BLOCK_C], ACC)
    base = slab * n_r * n_inner
    for r0 in range(0, n_r, BLOCK_R):
        r = (r0 + steps).to(tl.int64)
        mask = (r[:, None] < n_r) & (cols[None, :] < n_inner)
        offsets = base + r[:, None] * n_inner + cols[None, :]
        x = tl.load(X + offsets, mask=mask, other=0.0).to(ACC)
        y = tl.cumsum(x, axis=0) + carry[None, :]
        tl.store(Y + offsets, y.to(Y.dtype.element_ty), mask=mask)
        carry += tl.sum(x, axis=0)


def kf_forward(x, dim, dtype=None):
    d = int(dim) % x.dim()
    n_outer, n_r, n_inner = math.prod(x.shape[:d]), x.shape[d], math.prod(x.shape[d + 1:])
    y = torch.empty_like(x)
    grid = (n_outer * triton.cdiv(n_inner, BLOCK_C),)
    cumsum_columns[grid](x, y, n_r, n_inner, BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C,
                         ACC=tl.float64 if ACC_FP64 else tl.float32, num_warps=NUM_WARPS)
    return y
