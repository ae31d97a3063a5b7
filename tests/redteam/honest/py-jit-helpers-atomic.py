"""HONEST  py-jit-helpers-atomic
CLASS honest: @triton.jit device helpers, a tuple of block sizes, tl.atomic_add

Each row is cut into column blocks; one program per (row, block). A first kernel writes each
row's maximum through a @triton.jit helper, a second exponentiates its block (another
helper) and adds the block's sum into the row's total with tl.atomic_add, a third divides.
The row totals start from torch.zeros; block sizes come from a module-level tuple of
(rows per program, columns per program). Helpers called from kernels, atomics on a buffer the
launcher allocates and constant tuples are ordinary Triton; a scan that rejects helper calls
or atomics by name rejects honest kernels.

EXPECTED  ok
"""
import torch
import triton
import triton.language as tl

BLOCKS = ((1, 16), (1, 32), (1, 64))


@triton.jit
def _row_max(ptr, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), -float("inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(ptr + start + cols, mask=start + cols < n_cols, other=-float("inf")).to(tl.float32)
        m = tl.maximum(m, x)
    return tl.max(m, axis=0)


@triton.jit
def _shifted_exp(x, m):
    return tl.exp(x - m)


@triton.jit
def row_max_kernel(X, M, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    tl.store(M + row, _row_max(X + row * n_cols, n_cols, BLOCK_N))


@triton.jit
def exp_sum_kernel(X, Y, M, S, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = _shifted_exp(x, tl.load(M + row))
    tl.store(Y + row * n_cols + cols, e.to(Y.dtype.element_ty), mask=mask)
    tl.atomic_add(S + row, tl.sum(tl.where(mask, e, 0.0), axis=0))


@triton.jit
def normalise_kernel(Y, S, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    y = tl.load(Y + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * n_cols + cols, (y / tl.load(S + row)).to(Y.dtype.element_ty), mask=mask)


def kf_forward(x, dim, half_to_float):
    n_cols = x.shape[-1]
    rows = x.numel() // n_cols
    _, block = BLOCKS[-1] if n_cols > 32 else BLOCKS[0]
    y = torch.empty_like(x)
    m = torch.empty((rows,), device=x.device, dtype=torch.float32)
    s = torch.zeros((rows,), device=x.device, dtype=torch.float32)
    grid = (rows, triton.cdiv(n_cols, block))
    row_max_kernel[(rows,)](x, m, n_cols, BLOCK_N=block)
    exp_sum_kernel[grid](x, y, m, s, n_cols, BLOCK_N=block)
    normalise_kernel[grid](y, s, n_cols, BLOCK_N=block)
    return y
