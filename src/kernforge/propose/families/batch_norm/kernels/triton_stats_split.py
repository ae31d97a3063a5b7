"""kernforge builtin: batch norm with batch statistics, each channel split across programs.

kf-op: aten::native_batch_norm.default

Training mode without running statistics (and instance norm, which torch runs as this op on a
[1, N*C, H, W] view): per channel c, over the N x HW positions,
    mean[c] = mean(x[:, c]),  var[c] = mean((x[:, c] - mean[c])^2)   (biased)
    y = (x - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c]
and the saved statistics mean and invstd = 1/sqrt(var + eps), as eager returns them.

When the blocks of channels are too few to fill the SMs (a ResNet layer: 64 channels over
N x 56 x 56 positions), program (channel block, split) reduces one chunk of the positions to
float32 partials (count, mean, M2); a second kernel's programs each merge their channels'
SPLITS partials in the same order (deterministic: every chunk normalises with the same
statistics, run after run) and normalise their chunk.
"""
import torch
import triton
import triton.language as tl

# kf-constants: begin
N = 2
C = 3
HW = 35
EPS = 1e-05
CHANNELS_LAST = False
HAS_W = True
HAS_B = True
SAVED_FP32 = False
BLOCK_P = 16
BLOCK_C = 1
SPLITS = 2
NUM_WARPS = 1
# kf-constants: end


@triton.jit
def tile_offsets(m, c, C, HW, CHANNELS_LAST: tl.constexpr):
    # element (position m = n * HW + p, channel c) of an NHWC or an NCHW tensor
    if CHANNELS_LAST:
        return m[:, None] * C + c[None, :]
    return (m // HW * C * HW + m % HW)[:, None] + c[None, :] * HW


@triton.jit
def tile_stats(X, start, end, c, c_ok, C, HW, BLOCK_P: tl.constexpr, CHANNELS_LAST: tl.constexpr,
               BIG: tl.constexpr):
    # one tile's (count, mean, M2) per channel, exact two-pass in registers
    m = start + tl.arange(0, BLOCK_P)
    if BIG:  # offsets past 2^31 elements; 32-bit ones below it (64-bit division is emulated)
        m = m.to(tl.int64)
    ok = (m < end)[:, None] & c_ok[None, :]
    x = tl.load(X + tile_offsets(m, c, C, HW, CHANNELS_LAST), mask=ok, other=0.0).to(tl.float32)
    n = tl.minimum(end - start, BLOCK_P).to(tl.float32)
    mean = tl.sum(x, axis=0) / n
    d = tl.where(ok, x - mean[None, :], 0.0)
    return n, mean, tl.sum(d * d, axis=0)


@triton.jit
def merge(count, mean, m2, n_b, mean_b, m2_b):
    # Chan et al.: two (count, mean, M2) as one, without the cancellation of sum(x^2) - n mean^2
    total = count + n_b
    delta = mean_b - mean
    mean = mean + delta * (n_b / total)
    m2 = m2 + m2_b + delta * delta * (count * n_b / total)
    return total, mean, m2


@triton.jit
def tile_normalise(X, Y, start, end, c, c_ok, scale, shift, C, HW, BLOCK_P: tl.constexpr,
                   CHANNELS_LAST: tl.constexpr, BIG: tl.constexpr):
    m = start + tl.arange(0, BLOCK_P)
    if BIG:
        m = m.to(tl.int64)
    ok = (m < end)[:, None] & c_ok[None, :]
    offs = tile_offsets(m, c, C, HW, CHANNELS_LAST)
    x = tl.load(X + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(Y + offs, (x * scale[None, :] + shift[None, :]).to(Y.dtype.element_ty), mask=ok)


@triton.jit
def bn_partials(X, PART, M, C: tl.constexpr, HW: tl.constexpr, chunk, BLOCK_P: tl.constexpr,
                BLOCK_C: tl.constexpr, CHANNELS_LAST: tl.constexpr, BIG: tl.constexpr):
    # C and HW are compile-time constants: each element's // HW and % HW become a multiply and shift
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = c < C
    s = tl.program_id(1)
    if BIG:
        c = c.to(tl.int64)
        s = s.to(tl.int64)
    lo = s * chunk
    hi = tl.minimum(lo + chunk, M)
    count = tl.zeros([BLOCK_C], dtype=tl.float32)
    mean = tl.zeros([BLOCK_C], dtype=tl.float32)
    m2 = tl.zeros([BLOCK_C], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_P):
        n_b, mean_b, m2_b = tile_stats(X, start, hi, c, c_ok, C, HW, BLOCK_P, CHANNELS_LAST, BIG)
        count, mean, m2 = merge(count, mean, m2, n_b, mean_b, m2_b)
    row = PART + s * 3 * C + c
    tl.store(row, count, mask=c_ok)
    tl.store(row + C, mean, mask=c_ok)
    tl.store(row + 2 * C, m2, mask=c_ok)


@triton.jit
def bn_apply(X, W, B, Y, PART, SM, SI, M, C: tl.constexpr, HW: tl.constexpr, chunk, n_splits, eps,
             BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, CHANNELS_LAST: tl.constexpr, HAS_W: tl.constexpr,
             HAS_B: tl.constexpr, BIG: tl.constexpr):
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = c < C
    s = tl.program_id(1)
    if BIG:
        c = c.to(tl.int64)
        s = s.to(tl.int64)
    count = tl.zeros([BLOCK_C], dtype=tl.float32)
    mean = tl.zeros([BLOCK_C], dtype=tl.float32)
    m2 = tl.zeros([BLOCK_C], dtype=tl.float32)
    for k in range(0, n_splits):  # split 0 first in every program: the same bits everywhere
        row = PART + k * 3 * C + c
        n_k = tl.load(row, mask=c_ok, other=1.0)
        mean_k = tl.load(row + C, mask=c_ok, other=0.0)
        m2_k = tl.load(row + 2 * C, mask=c_ok, other=0.0)
        count, mean, m2 = merge(count, mean, m2, n_k, mean_k, m2_k)
    invstd = tl.rsqrt(m2 / count + eps)
    first = c_ok & (s == 0)  # split 0's programs write the saved statistics
    tl.store(SM + c, mean.to(SM.dtype.element_ty), mask=first)
    tl.store(SI + c, invstd.to(SI.dtype.element_ty), mask=first)
    scale = invstd
    if HAS_W:
        scale = scale * tl.load(W + c, mask=c_ok, other=0.0).to(tl.float32)
    shift = -mean * scale
    if HAS_B:
        shift = shift + tl.load(B + c, mask=c_ok, other=0.0).to(tl.float32)
    lo = s * chunk
    hi = tl.minimum(lo + chunk, M)
    for start in range(lo, hi, BLOCK_P):
        tile_normalise(X, Y, start, hi, c, c_ok, scale, shift, C, HW, BLOCK_P, CHANNELS_LAST, BIG)


def kf_forward(input, weight, bias, *rest):
    x = input
    # y keeps x's layout; the saved mean and invstd are [C], in the dtype the task lists
    y = torch.empty_like(x)
    saved_dtype = torch.float32 if SAVED_FP32 else x.dtype
    save_mean = torch.empty(C, dtype=saved_dtype, device=x.device)
    save_invstd = torch.empty(C, dtype=saved_dtype, device=x.device)
    m = N * HW
    # chunks of whole tiles; SPLITS at most, none empty
    chunk = triton.cdiv(triton.cdiv(m, SPLITS), BLOCK_P) * BLOCK_P
    n_splits = triton.cdiv(m, chunk)
    partials = torch.empty((n_splits, 3, C), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(C, BLOCK_C), n_splits)
    big = N * C * HW + BLOCK_P * C >= 2**31
    bn_partials[grid](x, partials, m, C, HW, chunk, BLOCK_P=BLOCK_P, BLOCK_C=BLOCK_C,
                      CHANNELS_LAST=CHANNELS_LAST, BIG=big, num_warps=NUM_WARPS)
    bn_apply[grid](x, weight if HAS_W else x, bias if HAS_B else x, y, partials, save_mean, save_invstd, m, C,
                   HW, chunk, n_splits, EPS, BLOCK_P=BLOCK_P, BLOCK_C=BLOCK_C, CHANNELS_LAST=CHANNELS_LAST,
                   HAS_W=HAS_W, HAS_B=HAS_B, BIG=big, num_warps=NUM_WARPS)
    return y, save_mean, save_invstd
