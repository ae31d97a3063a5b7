"""kernforge builtin: max/min over the last dim with the index, each row split across programs.

kf-op: aten::argmax.default

For few long rows (an argmax over a whole flattened tensor is one row), too few to fill the
GPU one per program: program (row, s) finds the best (value, index) of its chunk of the row,
a run of whole BLOCK_N blocks; a second kernel combines a row's SPLITS partials. Indices are
global, so the combine keeps eager's rules: the first index on ties, NaN beats every number.
min is the max of -x (negation is exact and keeps NaN a NaN).
"""
import torch
import triton
import triton.language as tl

# kf-constants: begin
BLOCK_N = 1024
SPLITS = 8
NUM_WARPS = 8
IS_MIN = False
VALUES = False
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
def extreme_partials(X, PV, PI, n_cols, chunk, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr,
                     IS_MIN: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    lanes = tl.arange(0, BLOCK_N).to(tl.int64)
    best = tl.full([BLOCK_N], -float("inf"), tl.float32)
    at = tl.full([BLOCK_N], n_cols, tl.int64)
    begin = split.to(tl.int64) * chunk
    end = tl.minimum(begin + chunk, n_cols)
    for start in range(begin, end, BLOCK_N):
        cols = start + lanes
        mask = cols < end
        x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        if IS_MIN:
            x = -x
        x = tl.where(mask, x, -float("inf"))
        best, at = pick(best, at, x, tl.where(mask, cols, n_cols))
    best, at = tl.reduce((best, at), 0, pick)
    # An empty chunk (past the row's end) leaves -inf at index n_cols: it never wins.
    tl.store(PV + row * SPLITS + split, best)
    tl.store(PI + row * SPLITS + split, at)


@triton.jit
def extreme_combine(PV, PI, V, I, SPLITS: tl.constexpr, IS_MIN: tl.constexpr, VALUES: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, SPLITS)
    best, at = tl.reduce((tl.load(PV + row * SPLITS + k), tl.load(PI + row * SPLITS + k)), 0, pick)
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
    # Each chunk a run of whole blocks, so that only the row's last block is ragged.
    chunk = triton.cdiv(triton.cdiv(n_cols, SPLITS), BLOCK_N) * BLOCK_N
    partial_values = torch.empty((n_rows, SPLITS), dtype=torch.float32, device=x.device)
    partial_indices = torch.empty((n_rows, SPLITS), dtype=torch.int64, device=x.device)
    extreme_partials[(n_rows, SPLITS)](x, partial_values, partial_indices, n_cols, chunk, BLOCK_N=BLOCK_N,
                                       SPLITS=SPLITS, IS_MIN=IS_MIN, num_warps=NUM_WARPS)
    extreme_combine[(n_rows,)](partial_values, partial_indices, values, indices, SPLITS=SPLITS, IS_MIN=IS_MIN,
                               VALUES=VALUES)
    return (values, indices) if VALUES else indices
