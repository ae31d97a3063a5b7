"""kernforge builtin: max/min over a dim that is not the last, with the index: columns.

kf-op: aten::max.dim

The input is row-major [outer, R, inner] around the reduced dim. Each program takes BLOCK_C
adjacent columns of one slab o (contiguous in memory: the loads coalesce along inner) and walks
R in steps of BLOCK_R, each lane keeping its own running best (value, index); the BLOCK_R
lanes of a column are reduced once at the end. Eager's rules: the first index of the extreme
on ties, NaN beats every number. min is the max of -x (negation is exact, keeps NaN a NaN).
"""
import math

import torch
import triton
import triton.language as tl

# kf-constants: begin
BLOCK_R = 8
BLOCK_C = 64
NUM_WARPS = 4
IS_MIN = False
VALUES = True
# kf-constants: end


@triton.jit
def pick(v1, i1, v2, i2):
    # The better of two (value, index) pairs: a NaN, else the larger, else the smaller index.
    nan1 = v1 != v1
    nan2 = v2 != v2
    first = i1 < i2
    take1 = (nan1 & (~nan2 | first)) | (~nan1 & ~nan2 & ((v1 > v2) | ((v1 == v2) & first)))
    return tl.where(take1, v1, v2), tl.where(take1, i1, i2)


@triton.jit
def extreme_columns(X, V, I, n_r, n_inner, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
                    IS_MIN: tl.constexpr, VALUES: tl.constexpr):
    # One grid axis (the second is limited to 65535): program p is column block p % blocks of slab p // blocks.
    blocks = tl.cdiv(n_inner, BLOCK_C)
    slab = (tl.program_id(0) // blocks).to(tl.int64)
    cols = (tl.program_id(0) % blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    steps = tl.arange(0, BLOCK_R)
    best = tl.full([BLOCK_R, BLOCK_C], -float("inf"), tl.float32)
    at = tl.full([BLOCK_R, BLOCK_C], n_r, tl.int64)
    base = X + slab * n_r * n_inner
    for r0 in range(0, n_r, BLOCK_R):
        r = (r0 + steps).to(tl.int64)
        mask = (r[:, None] < n_r) & (cols[None, :] < n_inner)
        x = tl.load(base + r[:, None] * n_inner + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if IS_MIN:
            x = -x
        x = tl.where(mask, x, -float("inf"))
        index = tl.where(mask, r[:, None], n_r)
        best, at = pick(best, at, x, index)
    best, at = tl.reduce((best, at), 0, pick)
    if IS_MIN:
        best = -best
    out = slab * n_inner + cols
    if VALUES:
        tl.store(V + out, best.to(V.dtype.element_ty), mask=cols < n_inner)
    tl.store(I + out, at, mask=cols < n_inner)


def output_shape(x, dim, keepdim):
    """Eager's: the reduced dim dropped (kept as 1 with keepdim); dim None reduces them all."""
    if dim is None:
        return [1] * x.dim() if keepdim else []
    d = int(dim) % x.dim()
    return [1 if i == d else n for i, n in enumerate(x.shape) if i != d or keepdim]


def kf_forward(x, dim=None, keepdim=False):
    d = int(dim) % x.dim()
    n_outer, n_r, n_inner = math.prod(x.shape[:d]), x.shape[d], math.prod(x.shape[d + 1:])
    shape = output_shape(x, dim, keepdim)
    indices = torch.empty(shape, dtype=torch.int64, device=x.device)
    values = torch.empty(shape, dtype=x.dtype, device=x.device) if VALUES else indices
    grid = (n_outer * triton.cdiv(n_inner, BLOCK_C),)
    extreme_columns[grid](x, values, indices, n_r, n_inner, BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C, IS_MIN=IS_MIN,
                          VALUES=VALUES, num_warps=NUM_WARPS)
    return (values, indices) if VALUES else indices
