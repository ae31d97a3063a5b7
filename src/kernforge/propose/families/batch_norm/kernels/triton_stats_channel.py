"""kernforge builtin: batch norm with batch statistics, a program per block of channels.

kf-op: aten::native_batch_norm.default

Training mode without running statistics (and instance norm, which torch runs as this op on a
[1, N*C, H, W] view): per channel c, over the N x HW positions,
    mean[c] = mean(x[:, c]),  var[c] = mean((x[:, c] - mean[c])^2)   (biased)
    y = (x - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c]
and the saved statistics mean and invstd = 1/sqrt(var + eps), as eager returns them.

A program owns BLOCK_C channels: it reads them in [BLOCK_P positions x BLOCK_C channels]
tiles, merging each tile's exact (count, mean, M2) into a running one with Chan's formula,
then reads them again to normalise. One launch, x read twice: for when the channel blocks alone
fill the SMs (instance norm's N*C planes, wide channels-last layers).
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
BLOCK_P = 64
BLOCK_C = 1
NUM_WARPS = 2
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
def bn_channel(X, W, B, Y, SM, SI, M, C: tl.constexpr, HW: tl.constexpr, eps, BLOCK_P: tl.constexpr,
               BLOCK_C: tl.constexpr, CHANNELS_LAST: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
               BIG: tl.constexpr):
    # C and HW are compile-time constants: each element's // HW and % HW become a multiply and shift
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = c < C
    if BIG:
        c = c.to(tl.int64)
    count = tl.zeros([BLOCK_C], dtype=tl.float32)
    mean = tl.zeros([BLOCK_C], dtype=tl.float32)
    m2 = tl.zeros([BLOCK_C], dtype=tl.float32)
    for start in range(0, M, BLOCK_P):
        n_b, mean_b, m2_b = tile_stats(X, start, M, c, c_ok, C, HW, BLOCK_P, CHANNELS_LAST, BIG)
        count, mean, m2 = merge(count, mean, m2, n_b, mean_b, m2_b)
    invstd = tl.rsqrt(m2 / count + eps)
    tl.store(SM + c, mean.to(SM.dtype.element_ty), mask=c_ok)
    tl.store(SI + c, invstd.to(SI.dtype.element_ty), mask=c_ok)
    scale = invstd
    if HAS_W:
        scale = scale * tl.load(W + c, mask=c_ok, other=0.0).to(tl.float32)
    shift = -mean * scale
    if HAS_B:
        shift = shift + tl.load(B + c, mask=c_ok, other=0.0).to(tl.float32)
    for start in range(0, M, BLOCK_P):
        tile_normalise(X, Y, start, M, c, c_ok, scale, shift, C, HW, BLOCK_P, CHANNELS_LAST, BIG)


def kf_forward(input, weight, bias, *rest):
    x = input
    # y keeps x's layout; the saved mean and invstd are [C], in the dtype the task lists
    y = torch.empty_like(x)
    saved_dtype = torch.float32 if SAVED_FP32 else x.dtype
    save_mean = torch.empty(C, dtype=saved_dtype, device=x.device)
    save_invstd = torch.empty(C, dtype=saved_dtype, device=x.device)
    bn_channel[(triton.cdiv(C, BLOCK_C),)](
        x, weight if HAS_W else x, bias if HAS_B else x, y, save_mean, save_invstd, N * HW, C, HW, EPS,
        BLOCK_P=BLOCK_P, BLOCK_C=BLOCK_C, CHANNELS_LAST=CHANNELS_LAST, HAS_W=HAS_W, HAS_B=HAS_B,
        BIG=N * C * HW + BLOCK_P * C >= 2**31, num_warps=NUM_WARPS)
    return y, save_mean, save_invstd
