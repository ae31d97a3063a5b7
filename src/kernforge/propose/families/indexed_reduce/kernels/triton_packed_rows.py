"""kernforge builtin: max/min over the last dim with the index, whole short rows in registers.

kf-op: aten::max.dim

ROWS_PER_PROGRAM whole rows per program, each held in registers with its column indices:
one read of x, one reduction. BLOCK_N is the row length rounded up to a power of two.
Eager's rules: the first index of the extreme on ties, NaN beats every number. min is the
max of -x (negation is exact and keeps NaN a NaN); the value written is the one found.
"""

import torch
import triton
import triton.language as tl

# kf-constants: begin
BLOCK_N = 64
ROWS_PER_PROGRAM = 4
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
def extreme_rows(X, V, I, n_rows, n_cols, BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
                 IS_MIN: tl.constexpr, VALUES: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(X + rows[:, None].to(tl.int64) * n_cols + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if IS_MIN:
        x = -x
    # Lanes past the row: -inf at index n_cols, which loses even to a real -inf (a lower index).
    x = tl.where(mask, x, -float("inf"))
    index = tl.where(mask, cols[None, :], n_cols)
    best, at = tl.reduce((x, index), 1, pick)
    if IS_MIN:
        best = -best
    if VALUES:
        tl.store(V + rows, best.to(V.dtype.element_ty), mask=rows < n_rows)
    tl.store(I + rows, at.to(tl.int64), mask=rows < n_rows)


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
    grid = (triton.cdiv(n_rows, ROWS_PER_PROGRAM),)
    extreme_rows[grid](x, values, indices, n_rows, n_cols, BLOCK_N=BLOCK_N, ROWS=ROWS_PER_PROGRAM,
                       IS_MIN=IS_MIN, VALUES=VALUES, num_warps=NUM_WARPS)
    return (values, indices) if VALUES else indices
