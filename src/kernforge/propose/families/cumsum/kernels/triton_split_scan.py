"""kernforge builtin: cumsum over the last dim, each row split across programs.

kf-op: aten::cumsum.default

For few very long rows, too few to fill the GPU one per program. Three passes: every block of
BLOCK_N sums itself; one program per row scans the row's block sums into offsets (the total
of the blocks before each); every block scans itself in registers and adds its offset. x is
read twice, y written once. Accumulated in float32 for 16-bit inputs and in float64 for
float32 ones (ACC_FP64), as eager's CPU kernel does.
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
def block_sums(X, S, n_cols, n_blocks, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    # One grid axis (the second is limited to 65535): program p is block p % n_blocks of row p // n_blocks.
    row = (tl.program_id(0) // n_blocks).to(tl.int64)
    block = tl.program_id(0) % n_blocks
    cols = block * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(X + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(ACC)
    tl.store(S + row * n_blocks + block, tl.sum(x, axis=0))


@triton.jit
def block_offsets(S, O, n_blocks, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK_N)
    carry = tl.zeros([1], ACC)
    for start in range(0, n_blocks, BLOCK_N):
        k = start + lanes
        s = tl.load(S + row * n_blocks + k, mask=k < n_blocks, other=0.0)
        # the blocks before each: the scan of the sums shifted by one, not the scan less the
        # block's own sum (an inf or NaN block would make every offset at and after it NaN)
        before = tl.load(S + row * n_blocks + k - 1, mask=(lanes > 0) & (k - 1 < n_blocks), other=0.0)
        tl.store(O + row * n_blocks + k, tl.cumsum(before, axis=0) + carry, mask=k < n_blocks)
        carry += tl.sum(s, axis=0)


@triton.jit
def scan_blocks(X, Y, O, n_cols, n_blocks, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    row = (tl.program_id(0) // n_blocks).to(tl.int64)
    block = tl.program_id(0) % n_blocks
    cols = block * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0).to(ACC)
    y = tl.cumsum(x, axis=0) + tl.load(O + row * n_blocks + block)
    tl.store(Y + row * n_cols + cols, y.to(Y.dtype.element_ty), mask=mask)


def kf_forward(x, dim, dtype=None):
    n_cols = x.shape[int(dim) % x.dim()]
    n_rows = x.numel() // n_cols
    y = torch.empty_like(x)
    acc = tl.float64 if ACC_FP64 else tl.float32
    n_blocks = triton.cdiv(n_cols, BLOCK_N)
    sums = torch.empty((n_rows, n_blocks), dtype=torch.float64 if ACC_FP64 else torch.float32, device=x.device)
    offsets = torch.empty_like(sums)
    block_sums[(n_rows * n_blocks,)](x, sums, n_cols, n_blocks, BLOCK_N=BLOCK_N, ACC=acc, num_warps=NUM_WARPS)
    block_offsets[(n_rows,)](sums, offsets, n_blocks, BLOCK_N=BLOCK_N, ACC=acc, num_warps=NUM_WARPS)
    scan_blocks[(n_rows * n_blocks,)](x, y, offsets, n_cols, n_blocks, BLOCK_N=BLOCK_N, ACC=acc,
                                      num_warps=NUM_WARPS)
    return y
