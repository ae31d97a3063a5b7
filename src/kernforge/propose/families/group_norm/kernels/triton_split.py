"""kernforge builtin: group norm, each group split into chunks over many programs.

kf-op: aten::native_group_norm.default

    y = (x - mean_g) * rsqrt(var_g + eps) * w[c] + b[c]   over each (sample, group of CG channels)

For few large groups, too few to fill the GPU one per program. Pass 1: program (g, i) finds
the (mean, M2) of chunk i of group g (Chan's formula over its blocks). Pass 2, a second
launch: each program combines its group's partials (a few KB, cached) and normalises its
chunk. REVERSE walks pass 2 backwards, so it first re-reads what pass 1 read last, still
in L2; WAVE_GROUPS runs both passes over a few groups at a time (0: all at once), so a
wave's second read comes from L2, at two launches a wave.
"""
import torch
import triton
import triton.language as tl

# kf-constants: begin
@triton.jit
def epilogue(y):
    return y

CHAIN = False
N_GROUPS = 2
GROUPS = 2
CG = 2
HW = 4096
GROUP_SIZE = 8192
EPS = 1e-05
HAS_W = True
HAS_B = True
STATS_FP32 = True
CHUNK = 2048
BLOCK = 512
NUM_WARPS = 4
REVERSE = True
WAVE_GROUPS = 0
# kf-constants: end


@triton.jit
def merge(count, mean, m2, x, ok, n_b):
    # Chan's formula: fold one block's (n_b, mean_b, M2_b) into the running statistics. The
    # block's mean corrected by the mean of the deviations from it: a constant block's is its
    # value exactly (the deviations are a few ulps), so a constant group's outputs are exactly 0,
    # as eager's Welford gives; rstd = 1/sqrt(eps) there magnifies any rounding of sum / n
    n_b = n_b.to(tl.float32)
    mean_b = tl.sum(x, axis=0) / tl.maximum(n_b, 1.0)
    mean_b += tl.sum(tl.where(ok, x - mean_b, 0.0), axis=0) / tl.maximum(n_b, 1.0)
    d = tl.where(ok, x - mean_b, 0.0)
    total = count + n_b
    delta = mean_b - mean
    share = n_b / tl.maximum(total, 1.0)
    return total, mean + delta * share, m2 + tl.sum(d * d, axis=0) + delta * delta * count * share


# kf-include: shared_triton.py


@triton.jit
def group_stats(PART, g, chunks, group_size, eps, CHUNK: tl.constexpr, CHUNKS_P2: tl.constexpr):
    # Group g's mean and rstd from its chunks' (mean, M2) partials (Chan's formula).
    j = tl.arange(0, CHUNKS_P2)
    ok = j < chunks
    part = PART + 2 * (g * chunks + j)
    means = tl.load(part, mask=ok, other=0.0)
    m2s = tl.load(part + 1, mask=ok, other=0.0)
    counts = tl.where(ok, tl.minimum(tl.maximum(group_size - j * CHUNK, 0), CHUNK), 0).to(tl.float32)
    mean = tl.sum(counts * means, axis=0) / group_size
    # refined by the partials' mean deviation from it: a constant group's is its value exactly
    # (counts * means rounds; the deviations are a few ulps)
    mean += tl.sum(counts * (means - mean), axis=0) / group_size
    dev = means - mean
    return mean, tl.rsqrt(tl.sum(m2s + counts * dev * dev, axis=0) / group_size + eps)


@triton.jit
def gn_partials(X, PART, group_size, chunks, g0, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    # Pass 1, program (g, i) of a wave starting at group g0: PART[g, i] = (mean, M2) of chunk i.
    pid = tl.program_id(0)
    g, i = g0 + pid // chunks, pid % chunks
    base = g.to(tl.int64) * group_size
    count = tl.zeros([], tl.float32)
    mean = tl.zeros([], tl.float32)
    m2 = tl.zeros([], tl.float32)
    for off in range(0, CHUNK, BLOCK):
        start = i * CHUNK + off
        idx = start + tl.arange(0, BLOCK)
        ok = idx < group_size
        x = tl.load(X + base + idx, mask=ok, other=0.0).to(tl.float32)
        n_b = tl.minimum(tl.maximum(group_size - start, 0), BLOCK)
        count, mean, m2 = merge(count, mean, m2, x, ok, n_b)
    tl.store(PART + 2 * (g * chunks + i), mean)
    tl.store(PART + 2 * (g * chunks + i) + 1, m2)


@triton.jit
def gn_apply(X, W, B, Y, PART, MEAN, RSTD, group_size, chunks, hw, eps, g0, n_programs,
             CHUNK: tl.constexpr, BLOCK: tl.constexpr, CHUNKS_P2: tl.constexpr, REVERSE: tl.constexpr,
             GROUPS: tl.constexpr, CG: tl.constexpr, IN_CHANNEL: tl.constexpr,
             HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # Pass 2, program (g, i): the group's statistics from its partials (every program of the
    # group does the same small sum: cheaper than a launch of its own), then chunk i normalised.
    pid = tl.program_id(0)
    if REVERSE:
        pid = n_programs - 1 - pid
    g, i = g0 + pid // chunks, pid % chunks
    mean, rstd = group_stats(PART, g, chunks, group_size, eps, CHUNK, CHUNKS_P2)
    tl.store(MEAN + g, mean.to(MEAN.dtype.element_ty), mask=i == 0)
    tl.store(RSTD + g, rstd.to(RSTD.dtype.element_ty), mask=i == 0)
    base = g.to(tl.int64) * group_size
    c0 = (g % GROUPS) * CG
    for off in range(0, CHUNK, BLOCK):
        start = i * CHUNK + off
        idx = start + tl.arange(0, BLOCK)
        ok = idx < group_size
        x = tl.load(X + base + idx, mask=ok, other=0.0).to(tl.float32)
        # HxW a multiple of the block: a block lies inside one channel, so w and b are scalars
        c = c0 + start // hw if IN_CHANNEL else c0 + idx // hw
        scale, shift = affine(W, B, c, ok, mean, rstd, IN_CHANNEL, HAS_W, HAS_B)
        tl.store(Y + base + idx, epilogue((x - mean) * scale + shift).to(Y.dtype.element_ty), mask=ok)


def launch(x, w, b, y, mean, rstd):
    chunks = triton.cdiv(GROUP_SIZE, CHUNK)
    # (mean, M2) of every chunk: 8 bytes per CHUNK elements, 0.03% of x's traffic at CHUNK=16K
    part = torch.empty((2 * N_GROUPS * chunks,), dtype=torch.float32, device=x.device)
    wave = WAVE_GROUPS or N_GROUPS
    for g0 in range(0, N_GROUPS, wave):
        programs = min(wave, N_GROUPS - g0) * chunks
        gn_partials[(programs,)](x, part, GROUP_SIZE, chunks, g0, CHUNK=CHUNK, BLOCK=BLOCK, num_warps=NUM_WARPS)
        gn_apply[(programs,)](x, w, b, y, part, mean, rstd, GROUP_SIZE, chunks, HW, EPS, g0, programs,
                              CHUNK=CHUNK, BLOCK=BLOCK, CHUNKS_P2=triton.next_power_of_2(chunks), REVERSE=REVERSE,
                              GROUPS=GROUPS, CG=CG, IN_CHANNEL=HW % BLOCK == 0, HAS_W=HAS_W, HAS_B=HAS_B,
                              num_warps=NUM_WARPS)


def kf_forward(input, weight, bias, N=None, C=None, HxW=None, group=None, eps=None):
    # a chain of group norm then element-wise steps (CHAIN) takes (x, weight, bias) and returns (y,)
    x = input
    y = torch.empty_like(x)
    # statistics of shape (N, G): float32 beside a 16-bit input on CUDA, the input's type on a CPU
    mean = torch.empty((N_GROUPS // GROUPS, GROUPS), dtype=torch.float32 if STATS_FP32 else x.dtype,
                       device=x.device)
    rstd = torch.empty_like(mean)
    launch(x, weight if HAS_W else x, bias if HAS_B else x, y, mean, rstd)
    return (y,) if CHAIN else (y, mean, rstd)
