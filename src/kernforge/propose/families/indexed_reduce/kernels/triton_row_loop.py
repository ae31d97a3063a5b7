"""kernforge builtin: max/min over the last dim with the index, one row per program in blocks.

kf-op: aten::max.dim

For rows too long for one tile: each lane of a BLOCK_N-wide block keeps its own running best
(value, index) over the row's blocks, and the lanes are reduced once at the end, so the loop
body is element-wise. Eager's rules: the first index of the extreme on ties, NaN beats every
number. min is the max of -x (negation is exact and keeps NaN a NaN).
"""
import torch
import triton
import triton.language as tl

# kf-constants: begin
BLOCK_N = 1024
NUM_WARPS = 8
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
def extreme_row_loop(X, V, I, n_cols, BLOCK_N: tl.constexpr, IS_MIN: tl.constexpr, VALUES: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK_N).to(tl.int64)
    # Start from -inf at index n_cols in every lane: any real element, even -inf, beats it.
    best = tl.full([BLOCK_N], -float("inf"), tl.float32)
    at = tl.full([BLOCK_N], n_cols, tl.int64)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + lanes
        mask = cols < n_cols
        x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        if IS_MIN:
            x = -x
        x = tl.where(mask, x, -float("inf"))
        best, at = pick(best, at, x, tl.where(mask, cols, n_cols))
    best, at = tl.reduce((best, at), 0, pick)
    if IS_MIN:
        best = -best
    if VALUES:
        tl.store(V + row, best.to(V.dtype.element_ty))
    tl.store(I + row, at)


def output_shape(x, dim, keepdim):
    """Eager's: the reduced dim dropped (kept as 1 with keepdim); dim None reduces them all."""
    if dim is None:
        return [1] * x.dim() if keepdim else []
    d = int(dim) % x.dim()
    return [1 if i == d else n for i, n in enumerate(x.shape) if i != d or keepdim]


def kf_forward(x, dim=None, keepdim=False):
    n_cols = x.numel() if dim is None else x.shape[int(dim) % x.dim()]
    n_rows = x.numel() // n_cols
    shape = output_shape(x, dim, keepdim)
    indices = torch.empty(shape, dtype=torch.int64, device=x.device)
    values = torch.empty(shape, dtype=x.dtype, device=x.device) if VALUES else indices
    extreme_row_loop[(n_rows,)](x, values, indices, n_cols, BLOCK_N=BLOCK_N, IS_MIN=IS_MIN, VALUES=VALUES,
                                num_warps=NUM_WARPS)
    return (values, indices) if VALUES else indices
