"""kernforge builtin: layer norm (or RMS norm) over the trailing dims, whole rows in registers.

kf-op: aten::native_layer_norm.default

ROWS_PER_PROGRAM whole rows per program, each row held in registers: x is read once (the
memory floor) and the statistics are exact two-pass (the mean corrected by the mean of the
deviations from it: exact on a constant row); the weight and bias are loaded once per
program. BLOCK_N is the row length rounded up to a power of two. PERSISTENT launches a
few programs per SM that walk the row blocks, keeping the weight in registers.
"""
import math

import torch
import triton
import triton.language as tl

# kf-constants: begin
BLOCK_N = 128
ROWS_PER_PROGRAM = 4
PERSISTENT = False
NUM_WARPS = 4
RMS = False
HAS_W = True
HAS_B = True
EPS = 1e-05
STATS_SHAPE = (5, 1, 1)
STATS_STRIDE = (1, 1, 1)
STATS_F32 = False
# kf-constants: end

PROGRAMS_PER_SM = 4  # persistent: enough resident programs to hide the load latency


@triton.jit
def norm_rows(X, W, B, Y, MEAN, RSTD, n_rows, n_cols, eps, iters,
              BLOCK_N: tl.constexpr, ROWS: tl.constexpr, RMS: tl.constexpr,
              HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # A persistent launch (iters > 1) walks row blocks pid, pid + grid, ...
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    if HAS_W:
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    if HAS_B:
        b = tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)
    for it in range(0, iters):
        block = tl.program_id(0) + it * tl.num_programs(0)
        rows = block * ROWS + tl.arange(0, ROWS)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        offsets = rows[:, None].to(tl.int64) * n_cols + cols[None, :]
        x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
        if RMS:
            rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
            y = x * rstd[:, None]
        else:
            # the mean corrected by the mean of the deviations from it: a constant row's is then
            # its value exactly (those deviations are a few ulps, summed exactly), so its outputs
            # are exactly 0, as eager's Welford gives; sum / n alone is off by the sum's rounding,
            # which rstd = 1/sqrt(eps) magnified to 0.0003
            mean = tl.sum(x, axis=1) / n_cols
            mean += tl.sum(tl.where(mask, x - mean[:, None], 0.0), axis=1) / n_cols
            d = tl.where(mask, x - mean[:, None], 0.0)
            rstd = tl.rsqrt(tl.sum(d * d, axis=1) / n_cols + eps)
            y = d * rstd[:, None]
            tl.store(MEAN + rows, mean.to(MEAN.dtype.element_ty), mask=row_ok)
        if HAS_W:
            y = y * w[None, :]
        if HAS_B:
            y = y + b[None, :]
        tl.store(Y + offsets, y.to(Y.dtype.element_ty), mask=mask)
        tl.store(RSTD + rows, rstd.to(RSTD.dtype.element_ty), mask=row_ok)


_SMS = {}


def sm_count(device):
    # the interpreter runs on the CPU: a few programs, so that persistent loops run more than once
    if device not in _SMS:
        _SMS[device] = (torch.cuda.get_device_properties(device).multi_processor_count
                        if device.type == "cuda" else 4)
    return _SMS[device]


def kf_forward(input, normalized_shape, weight=None, *rest, eps=None):
    # Layer norm is called (input, normalized_shape, weight, bias, eps), RMS norm (input,
    # normalized_shape, weight=None, eps=None); eps is the task's, fixed in EPS.
    x = input
    n_cols = math.prod(x.shape[x.dim() - len(normalized_shape):])
    n_rows = x.numel() // n_cols
    y = torch.empty_like(x)
    stats_dtype = torch.float32 if STATS_F32 else x.dtype
    rstd = torch.empty_strided(STATS_SHAPE, STATS_STRIDE, dtype=stats_dtype, device=x.device)
    mean = rstd if RMS else torch.empty_strided(STATS_SHAPE, STATS_STRIDE, dtype=stats_dtype, device=x.device)
    w = weight if HAS_W else x
    b = rest[0] if HAS_B else x  # RMS norm has no bias: the kernel never reads B then
    blocks = triton.cdiv(n_rows, ROWS_PER_PROGRAM)
    grid = min(blocks, PROGRAMS_PER_SM * sm_count(x.device)) if PERSISTENT else blocks
    norm_rows[(grid,)](x, w, b, y, mean, rstd, n_rows, n_cols, EPS, triton.cdiv(blocks, grid),
                       BLOCK_N=BLOCK_N, ROWS=ROWS_PER_PROGRAM, RMS=RMS, HAS_W=HAS_W, HAS_B=HAS_B,
                       num_warps=NUM_WARPS)
    return (y, rstd) if RMS else (y, mean, rstd)
