"""kernforge builtin: group norm, the whole GPU holding one group at a time in registers.

kf-op: aten::native_group_norm.default

    y = (x - mean_g) * rsqrt(var_g + eps) * w[c] + b[c]   over each (sample, group of CG channels)

Program p keeps chunk p of every group in registers, one program per chunk of a group, all
resident at once. x is read from DRAM once and never again, from L2 or anywhere. Each
iteration a program starts loading a group ahead, looks at group g's partials, publishes its
own of group g + EARLY (EARLY = 2 with PIPELINE, else 1), then normalises the chunk of group g
that it already holds: group g's partials were published EARLY iterations ago, so the wait is
usually over. The whole GPU works on one group at a time, so the bytes in flight are those of
the groups loading ahead; LEAD > EARLY + 1 adds bulk L2 prefetches of the group LEAD ahead:
bytes in flight that hold no registers. On the H200, (1,256,512,512) bf16 took 0.0768 ms,
1.21x the floor (bench/results/h200/search/table_all.md).
"""
import torch
import triton
import triton.language as tl

# kf-constants: begin
@triton.jit
def epilogue(y):
    return y

CHAIN = False
N_GROUPS = 8
GROUPS = 4
CG = 2
HW = 1024
GROUP_SIZE = 2048
EPS = 1e-05
HAS_W = True
HAS_B = True
STATS_FP32 = True
CHUNK = 512
ROWS = 1
NUM_WARPS = 2
PIPELINE = True
PER_SM = 2
LEAD = 3
PAIR_CVT = None
PAIR_BF16 = False
# kf-constants: end


# kf-include: shared_triton.py


@triton.jit
def fill(PTR, n, value, BLOCK: tl.constexpr):
    # The partials start each call at -1 (nothing published), in a launch of their own: the
    # waiting kernel cannot clear them itself without a second wait.
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(PTR + idx, tl.zeros([BLOCK], tl.int32) + value, mask=idx < n)


@triton.jit
def unpack(v, TY: tl.constexpr, BF16: tl.constexpr):
    # A 32-bit word of two 16-bit values (PAIRS) as two floats; TY is the 16-bit type.
    if BF16:  # bf16 is float32's upper half
        return (v << 16).to(tl.float32, bitcast=True), (v & -65536).to(tl.float32, bitcast=True)
    return (v.to(tl.int16).to(TY, bitcast=True).to(tl.float32),
            (v >> 16).to(tl.int16).to(TY, bitcast=True).to(tl.float32))


@triton.jit
def pack(lo, hi, TY: tl.constexpr, CVT: tl.constexpr):
    # Two floats rounded to TY as one word: one cvt instruction a pair on a GPU (CVT), casts and
    # shifts on the interpreter, which has no inline assembly.
    if CVT != "":
        return tl.inline_asm_elementwise(CVT, "=r,r,r", [lo, hi], dtype=tl.int32, is_pure=True, pack=1)
    return ((lo.to(TY).to(tl.int16, bitcast=True).to(tl.int32) & 65535)
            | (hi.to(TY).to(tl.int16, bitcast=True).to(tl.int32) << 16))


@triton.jit
def add_triples(a, b, c, d, e, f):
    return a + d, b + e, c + f


@triton.jit
def add_quads(a, b, c, d, e, f, g, h):
    return tl.maximum(a, e), b + f, c + g, d + h


@triton.jit
def sum_triples(a, b, c, ROWS: tl.constexpr):
    # Sums of three [ROWS, C] tiles: over the rows first, in each thread ROWS-long chains side by
    # side, then across the program (a [CHUNK] tile would add a thread's values in one long chain)
    if ROWS > 1:
        a, b, c = tl.reduce((a, b, c), 0, add_triples)
    return tl.reduce((a, b, c), 0, add_triples)


@triton.jit
def mean_of(total, shifted, k, n):
    # The mean of n values from their sum and the sum of their deviations from k: k + shifted / n
    # where the mean lies within k / 2 of k (nothing cancels, and a constant chunk's or group's is
    # k exactly, as eager's Welford gives: rstd = 1/sqrt(eps) magnifies any rounding of it), else
    # total / n (k + shifted / n would carry k's rounding: 1e-7 on a mean of 2e-3, in float32)
    return tl.where(tl.abs(shifted) <= 0.5 * n * tl.abs(k), k + shifted / n, total / n)


@triton.jit
def publish_slice(PART, x, k, ok, n, g, pid, CHUNKS: tl.constexpr, EVEN: tl.constexpr, ROWS: tl.constexpr,
                  PAIRS: tl.constexpr, TY: tl.constexpr, BF16: tl.constexpr):
    # (mean, M2) of one program's chunk of group g to PART[g] as bits, with one reduction across
    # the program: the sums of x and of x - k, for the mean (mean_of), and of (x - k)^2, k a value
    # of the chunk, for M2, so that a large mean cancels nothing. Returns the mean. PART[g] holds the chunks' means,
    # then their M2s. The bits are their own flag: PART starts as -1 (a NaN that no arithmetic
    # gives; a result with those bits is stored as another NaN), so a reader that finds no -1 has
    # them all, with no counter and no fence: a release fence would wait for every load the
    # program has in flight, the next groups' too.
    if PAIRS:
        lo, hi = unpack(x, TY, BF16)
        dl = lo - k
        dh = hi - k
        if not EVEN:
            dl = tl.where(ok, dl, 0.0)
            dh = tl.where(ok, dh, 0.0)
        s, sd, q = sum_triples(lo + hi, dl + dh, dl * dl + dh * dh, ROWS)  # masked-off words hold 0
    else:
        x = x.to(tl.float32)
        d = x - k
        if not EVEN:
            d = tl.where(ok, d, 0.0)
        s, sd, q = sum_triples(x, d, d * d, ROWS)  # masked-off lanes of x hold 0
    mean = mean_of(s, sd, k, n)
    mean_bits = mean.to(tl.int32, bitcast=True)
    m2_bits = tl.maximum(q - n * (mean - k) * (mean - k), 0.0, propagate_nan=tl.PropagateNan.ALL).to(tl.int32, bitcast=True)
    tl.store(PART + 2 * g * CHUNKS + pid, tl.where(mean_bits == -1, 0x7FC00000, mean_bits))
    tl.store(PART + (2 * g + 1) * CHUNKS + pid, tl.where(m2_bits == -1, 0x7FC00000, m2_bits))
    return mean


@triton.jit
def peek(PART, g, CHUNKS: tl.constexpr, CHUNKS_P2: tl.constexpr):
    # Group g's partials as they are now, from L2 (volatile: never a stale copy). Issued before the
    # program's own statistics of the next group, so that their latency hides behind that work.
    j = tl.arange(0, CHUNKS_P2)
    at = PART + 2 * g * CHUNKS + j
    return (tl.load(at, mask=j < CHUNKS, other=0, volatile=True),
            tl.load(at + CHUNKS, mask=j < CHUNKS, other=0, volatile=True))


@triton.jit
def gather(mean_bits, m2_bits, k, counts):
    # One reduction: partials still missing (-1), the group's sum and its sum about k, and Chan's
    # M2 sum about k
    means = mean_bits.to(tl.float32, bitcast=True)
    dev = means - k
    return tl.reduce((((mean_bits == -1) | (m2_bits == -1)).to(tl.int32), counts * means, counts * dev,
                      m2_bits.to(tl.float32, bitcast=True) + counts * dev * dev), 0, add_quads)


@triton.jit
def settle(PART, g, mean_bits, m2_bits, k, group_size, eps, CHUNK: tl.constexpr, CHUNKS: tl.constexpr,
           CHUNKS_P2: tl.constexpr):
    # Group g's mean and rstd once no partial is -1: a program that has not published yet is
    # waited for by looking again (on the interpreter they are all there at the first look).
    # Chan's formula about k (the program's own chunk's mean), not the group's mean, so that one
    # reduction gives the sums (and the count of missing partials): the group's variance includes
    # its chunks' spread, so k - mean is a few standard deviations and nothing cancels.
    j = tl.arange(0, CHUNKS_P2)
    counts = tl.where(j < CHUNKS, tl.minimum(tl.maximum(group_size - j * CHUNK, 0), CHUNK), 0).to(tl.float32)
    missing, a, ad, b = gather(mean_bits, m2_bits, k, counts)
    while missing > 0:
        mean_bits, m2_bits = peek(PART, g, CHUNKS, CHUNKS_P2)
        missing, a, ad, b = gather(mean_bits, m2_bits, k, counts)
    mean = mean_of(a, ad, k, group_size)
    # NaN kept (a group holding a NaN, or +inf and -inf): eager's rstd is NaN there, not 1/sqrt(eps)
    return mean, tl.rsqrt(tl.maximum(b / group_size - (mean - k) * (mean - k), 0.0, propagate_nan=tl.PropagateNan.ALL) + eps)


@triton.jit
def own_mean(PART, g, pid, CHUNKS: tl.constexpr):
    # the mean this program published for its chunk of group g
    return tl.load(PART + 2 * g * CHUNKS + pid).to(tl.float32, bitcast=True)


@triton.jit
def held_chunk(XH, X, g, idx, ok, n_groups, values, group, pid, CHUNK: tl.constexpr):
    # This program's chunk of group g (nothing past the last group), and its first value: the
    # shift of that group's statistics in this program
    x = tl.load(XH + g * group + idx, mask=ok & (g < n_groups), other=0, eviction_policy="evict_first")
    k = tl.load(X + g * values + pid * CHUNK, mask=g < n_groups, other=0.0).to(tl.float32)
    return x, k


@triton.jit
def gn_held(X, W, B, Y, PART, MEAN, RSTD, n_groups, group_size, hw, eps,
            CHUNK: tl.constexpr, CHUNKS: tl.constexpr, CHUNKS_P2: tl.constexpr, PHASE: tl.constexpr,
            EVEN: tl.constexpr, ROWS: tl.constexpr, THREADS: tl.constexpr, EARLY: tl.constexpr,
            LEAD: tl.constexpr, PREFETCH: tl.constexpr, PAIRS: tl.constexpr, BF16: tl.constexpr,
            CVT: tl.constexpr, GROUPS: tl.constexpr, CG: tl.constexpr, IN_CHANNEL: tl.constexpr,
            HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # The held chunks rotate through x0 (the group normalised), x1.. and x{EARLY} (the group
    # published), then x{EARLY + 1} (the group loading); k and m (this program's chunk mean of
    # each group, the shift of that group's statistics) rotate with them.
    # EVEN: chunks divide the group, so nothing is masked. ROWS: the chunk as a [ROWS, CHUNK / ROWS]
    # tile. PREFETCH: the L2 prefetch instruction ("" for none: a lead within the groups loading,
    # x not 16-byte aligned, or not a GPU).
    # PAIRS: 16-bit x and y are loaded and held as 32-bit words of two values. Held as 16-bit
    # tensors, the chunks are carried across the loop a value a register and repacked each
    # iteration (ptxas, sm_90: 293 PRMT an iteration at the start's point); as words they need
    # no repacking, and y packs with one cvt a pair (CVT): 0.5-2% faster in probe19, 0.6-22% with
    # statistics two groups ahead in probe23.
    # PHASE 0 does it all; 1 and 2 (statistics, then normalising) are two launches for programs
    # that run one after another (the CPU interpreter), which would wait forever in one.
    pid = tl.program_id(0)
    UNIT: tl.constexpr = 2 if PAIRS else 1  # values a held element
    WIDTH: tl.constexpr = CHUNK // UNIT  # held elements a chunk
    if PAIRS:
        XH = X.to(tl.pointer_type(tl.int32))
        YH = Y.to(tl.pointer_type(tl.int32))
    else:
        XH = X
        YH = Y
    if ROWS == 1:
        idx = pid * WIDTH + tl.arange(0, WIDTH)
    else:
        idx = pid * WIDTH + tl.arange(0, ROWS)[:, None] * (WIDTH // ROWS) + tl.arange(0, WIDTH // ROWS)[None, :]
    ok = idx < group_size // UNIT
    values = group_size.to(tl.int64)
    group = values // UNIT  # held elements a group
    if EVEN:
        x0 = tl.load(XH + idx, eviction_policy="evict_first")
    else:
        x0 = tl.load(XH + idx, mask=ok, other=0, eviction_policy="evict_first")
    k0 = tl.load(X + pid * CHUNK).to(tl.float32)
    x1, k1 = held_chunk(XH, X, 1, idx, ok, n_groups, values, group, pid, CHUNK)
    if EARLY == 2:
        x2, k2 = held_chunk(XH, X, 2, idx, ok, n_groups, values, group, pid, CHUNK)
    n = tl.minimum(group_size - pid * CHUNK, CHUNK).to(tl.float32)
    m0 = 0.0
    if EARLY == 2:
        m1 = 0.0
    if PHASE != 2:
        m0 = publish_slice(PART, x0, k0, ok, n, 0, pid, CHUNKS, EVEN, ROWS, PAIRS, Y.dtype.element_ty, BF16)
        if EARLY == 2:
            if n_groups > 1:
                m1 = publish_slice(PART, x1, k1, ok, n, 1, pid, CHUNKS, EVEN, ROWS, PAIRS, Y.dtype.element_ty, BF16)
    for g in range(0, n_groups):
        if PREFETCH != "":
            # each warp asks L2 for its piece of this program's chunk of group g + LEAD with one
            # bulk prefetch; the warp's lanes give the same address, so it issues once a warp
            ahead = tl.minimum(g + LEAD, n_groups - 1)  # the last group again past the end: harmless
            piece = X + ahead * values + pid * CHUNK + tl.arange(0, THREADS) // 32 * (CHUNK // (THREADS // 32))
            tl.inline_asm_elementwise(PREFETCH, "=r,l", [piece], dtype=tl.int32, is_pure=False, pack=1)
        if EARLY == 1:
            x2, k2 = held_chunk(XH, X, g + 2, idx, ok, n_groups, values, group, pid, CHUNK)
        else:
            x3, k3 = held_chunk(XH, X, g + 3, idx, ok, n_groups, values, group, pid, CHUNK)
        if PHASE != 1:
            mean_bits, m2_bits = peek(PART, g, CHUNKS, CHUNKS_P2)
        if EARLY == 1:
            m1 = m0
            if PHASE != 2:
                if g + 1 < n_groups:
                    m1 = publish_slice(PART, x1, k1, ok, n, g + 1, pid, CHUNKS, EVEN, ROWS, PAIRS,
                                       Y.dtype.element_ty, BF16)
        else:
            m2 = m1
            if PHASE != 2:
                if g + 2 < n_groups:
                    m2 = publish_slice(PART, x2, k2, ok, n, g + 2, pid, CHUNKS, EVEN, ROWS, PAIRS,
                                       Y.dtype.element_ty, BF16)
        if PHASE != 1:
            if PHASE == 2:  # the two-launch form: the mean that pass 1 published
                m0 = own_mean(PART, g, pid, CHUNKS)
            mean, rstd = settle(PART, g, mean_bits, m2_bits, m0, group_size, eps, CHUNK, CHUNKS, CHUNKS_P2)
            tl.store(MEAN + g, mean.to(MEAN.dtype.element_ty), mask=pid == 0)
            tl.store(RSTD + g, rstd.to(RSTD.dtype.element_ty), mask=pid == 0)
            c0 = (g % GROUPS) * CG
            # HxW a multiple of the chunk: the chunk lies inside one channel, so w and b are scalars
            # (pairs need HxW even: a word's two values then share their channel)
            c = c0 + pid * CHUNK // hw if IN_CHANNEL else c0 + idx * UNIT // hw
            scale, shift = affine(W, B, c, ok, mean, rstd, IN_CHANNEL, HAS_W, HAS_B)
            if PAIRS:
                lo, hi = unpack(x0, Y.dtype.element_ty, BF16)
                y = pack(epilogue((lo - mean) * scale + shift), epilogue((hi - mean) * scale + shift), Y.dtype.element_ty, CVT)
            else:
                y = epilogue((x0.to(tl.float32) - mean) * scale + shift).to(Y.dtype.element_ty)
            # y streams out (evict_first): the L2 keeps the groups prefetched ahead
            if EVEN:
                tl.store(YH + g * group + idx, y, eviction_policy="evict_first")
            else:
                tl.store(YH + g * group + idx, y, mask=ok, eviction_policy="evict_first")
        if EARLY == 1:
            x0, x1 = x1, x2
            k0, k1 = k1, k2
            m0 = m1
        else:
            x0, x1, x2 = x1, x2, x3
            k0, k1, k2 = k1, k2, k3
            m0, m1 = m1, m2


def l2_prefetch(element_size):
    """The bulk L2 prefetch of one warp's piece of a chunk, for a lead past the groups loading
    into registers; "" for none."""
    if LEAD <= (2 if PIPELINE else 1) + 1:
        return ""
    return f"cp.async.bulk.prefetch.L2.global [$1], {CHUNK // NUM_WARPS * element_size}; mov.u32 $0, 0;"


_SMS = {}


def sm_count(device):
    # the interpreter runs on the CPU: a few programs, so that persistent loops run more than once
    if device not in _SMS:
        _SMS[device] = (torch.cuda.get_device_properties(device).multi_processor_count
                        if device.type == "cuda" else 4)
    return _SMS[device]


def launch(x, w, b, y, mean, rstd):
    chunks = triton.cdiv(GROUP_SIZE, CHUNK)
    part = torch.empty((2 * N_GROUPS * chunks,), dtype=torch.int32, device=x.device)  # (mean, M2) bits
    fill[(triton.cdiv(part.numel(), 1024),)](part, part.numel(), -1, BLOCK=1024)  # nothing published
    # 16-bit values held and stored as pairs where x and y are 4-byte aligned
    pairs = PAIR_CVT is not None and x.data_ptr() % 4 == 0 and y.data_ptr() % 4 == 0
    gpu = x.device.type == "cuda"
    common = dict(CHUNK=CHUNK, CHUNKS=chunks, CHUNKS_P2=triton.next_power_of_2(chunks),
                  EVEN=GROUP_SIZE % CHUNK == 0, ROWS=ROWS, THREADS=32 * NUM_WARPS, EARLY=2 if PIPELINE else 1,
                  LEAD=LEAD, PAIRS=pairs, BF16=PAIR_BF16, CVT=PAIR_CVT if pairs and gpu else "", GROUPS=GROUPS,
                  CG=CG, IN_CHANNEL=HW % CHUNK == 0, HAS_W=HAS_W, HAS_B=HAS_B, num_warps=NUM_WARPS,
                  num_stages=1,
                  # PER_SM programs share an SM's 64K registers
                  maxnreg=min(255, 65536 // (PER_SM * 32 * NUM_WARPS) // 8 * 8))
    args = (x, w, b, y, part, mean, rstd, N_GROUPS, GROUP_SIZE, HW, EPS)
    if gpu and chunks <= PER_SM * sm_count(x.device):
        # every program must be resident at once: a cooperative launch refuses a grid that
        # cannot be (registers, a GPU with fewer SMs), where a plain one would hang
        prefetch = l2_prefetch(x.element_size()) if x.data_ptr() % 16 == 0 else ""
        gn_held[(chunks,)](*args, PHASE=0, PREFETCH=prefetch, launch_cooperative_grid=True, **common)
    else:  # programs that cannot all be resident would wait forever: one launch per pass instead
        gn_held[(chunks,)](*args, PHASE=1, PREFETCH="", **common)
        gn_held[(chunks,)](*args, PHASE=2, PREFETCH="", **common)


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
