"""kernforge builtin: layer norm (or RMS norm) over the trailing dims, one row per program, read in blocks.

kf-op: aten::native_layer_norm.default

The row is read twice: first for its statistics (each block's count, mean and M2 merged
into the running ones with Chan's formula: two-pass precision without the cancellation of
sum(x^2) - n mean^2), then again to normalise it. For rows of any length.
"""
import math

import torch
import triton
import triton.language as tl

# kf-constants: begin
BLOCK_N = 512
NUM_STAGES = 2
NUM_WARPS = 4
RMS = False
HAS_W = True
HAS_B = True
EPS = 1e-05
STATS_SHAPE = (3, 1)
STATS_STRIDE = (1, 1)
STATS_F32 = False
# kf-constants: end


@triton.jit
def norm_rows_loop(X, W, B, Y, MEAN, RSTD, n_cols, eps, BLOCK_N: tl.constexpr, RMS: tl.constexpr,
                   HAS_W: tl.constexpr, HAS_B: tl.constexpr, STAGES: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row, y_row = X + row * n_cols, Y + row * n_cols
    count = tl.zeros([], tl.float32)
    mean = tl.zeros([], tl.float32)
    m2 = tl.zeros([], tl.float32)
    for start in tl.range(0, n_cols, BLOCK_N, num_stages=STAGES):
        cols = start + tl.arange(0, BLOCK_N)
        ok = cols < n_cols
        x = tl.load(x_row + cols, mask=ok, other=0.0).to(tl.float32)
        if RMS:
            m2 += tl.sum(x * x, axis=0)  # no centring: the mean stays 0
        else:
            n_b = tl.minimum(n_cols - start, BLOCK_N).to(tl.float32)
            # corrected by the mean of the deviations: a constant block's mean is its value
            # exactly, so Chan's delta is 0 and a constant row's outputs exactly 0, as eager's
            mean_b = tl.sum(x, axis=0) / n_b
            mean_b += tl.sum(tl.where(ok, x - mean_b, 0.0), axis=0) / n_b
            d = tl.where(ok, x - mean_b, 0.0)
            total = count + n_b
            delta = mean_b - mean
            mean += delta * (n_b / total)
            m2 += tl.sum(d * d, axis=0) + delta * delta * (count * n_b / total)
            count = total
    rstd = tl.rsqrt(m2 / n_cols + eps)
    if not RMS:
        tl.store(MEAN + row, mean.to(MEAN.dtype.element_ty))
    tl.store(RSTD + row, rstd.to(RSTD.dtype.element_ty))
    for start in tl.range(0, n_cols, BLOCK_N, num_stages=STAGES):
        cols = start + tl.arange(0, BLOCK_N)
        ok = cols < n_cols
        x = tl.load(x_row + cols, mask=ok, other=0.0).to(tl.float32)
        y = (x - mean) * rstd
        if HAS_W:
            y = y * tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
        if HAS_B:
            y = y + tl.load(B + cols, mask=ok, other=0.0).to(tl.float32)
        tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=ok)


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
    norm_rows_loop[(n_rows,)](x, w, b, y, mean, rstd, n_cols, EPS, BLOCK_N=BLOCK_N, RMS=RMS,
                              HAS_W=HAS_W, HAS_B=HAS_B, STAGES=NUM_STAGES, num_warps=NUM_WARPS)
    return (y, rstd) if RMS else (y, mean, rstd)
