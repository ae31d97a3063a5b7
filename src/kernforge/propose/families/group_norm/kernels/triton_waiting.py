"""kernforge builtin: group norm, programs that wait for their group, on one of two schedules.

kf-op: aten::native_group_norm.default

    y = (x - mean_g) * rsqrt(var_g + eps) * w[c] + b[c]   over each (sample, group of CG channels)

Pass 1 reads a chunk of a group (statistics to PART); the group's programs count themselves in
(ARRIVED[g]); pass 2 waits for the whole group, then re-reads the chunk, which pass 1 has left
in L2, to normalise it: x crosses DRAM about once. SCHEDULE says who does which pass when.

"resident": PER_SM programs an SM, all resident at once, take a few groups at a time (a wave):
program p takes chunk p % CHUNKS of one group of each wave, both passes. PIPELINE runs pass 1
of wave w before pass 2 of wave w - 1, so the wait is usually over.

"queue": every program takes tickets from one counter until none is left, each ticket one pass
over one chunk: pass 1 of chunk k, or pass 2 of a chunk LEAD groups behind. A pass 2 waits only
for passes 1 whose tickets were taken before its own, by programs that are running and never
wait in pass 1: no wave barrier, no deadlock whether or not every program is resident, and SMs
read one group while they write another. Pass 1 asks L2 to keep its lines for pass 2 (the queue
is bound by L2: ncu measured 87-89% L2 throughput on an H200).

PIPELINE is read by the resident schedule only, LEAD by the queue only.
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
BLOCK = 256
UNROLL = 1
NUM_WARPS = 2
SCHEDULE = "queue"
PER_SM = 8
PIPELINE = False
LEAD = 4
# kf-constants: end


# kf-include: shared_triton.py


@triton.jit
def mean_of(total, shifted, k, n):
    # The mean of n values from their sum and the sum of their deviations from k: k + shifted / n
    # where the mean lies within k / 2 of k (nothing cancels, and a constant chunk's is k exactly,
    # as eager's Welford gives: rstd = 1/sqrt(eps) magnifies any rounding of it), else total / n
    # (k + shifted / n would carry k's rounding: 1e-7 on a mean of 2e-3, in float32)
    return tl.where(tl.abs(shifted) <= 0.5 * n * tl.abs(k), k + shifted / n, total / n)


@triton.jit
def chunk_stats(X, PART, g, i, group_size, CHUNK: tl.constexpr, BLOCK: tl.constexpr, UNROLL: tl.constexpr,
                CHUNKS: tl.constexpr, EVICT: tl.constexpr):
    # Pass 1 of chunk i of group g: (mean, M2) to PART. Sums per lane, reduced across the program
    # once at the end: a block's loads never wait on a reduction, which one program per SM cannot
    # afford. The mean from the sum of x or from the sum of x minus the chunk's first value
    # (mean_of); M2 from the squares of x minus that value, so that a large mean does not swamp
    # the variance.
    base = g.to(tl.int64) * group_size
    shift = tl.load(X + base + i * CHUNK).to(tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    sd = tl.zeros([BLOCK], tl.float32)
    ss = tl.zeros([BLOCK], tl.float32)
    for off in range(0, CHUNK, BLOCK * UNROLL):
        # UNROLL blocks a trip, loaded as one tile: more bytes in flight per SM, which one
        # program per SM needs; the sum over the tile's rows stays in each thread
        if UNROLL == 1:
            idx = i * CHUNK + off + tl.arange(0, BLOCK)
        else:
            idx = i * CHUNK + off + tl.arange(0, UNROLL)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
        ok = idx < group_size
        x = tl.load(X + base + idx, mask=ok, other=0.0, eviction_policy=EVICT).to(tl.float32)
        d = tl.where(ok, x - shift, 0.0)
        if UNROLL == 1:
            s += x
            sd += d
            ss += d * d
        else:
            s += tl.sum(x, axis=0)
            sd += tl.sum(d, axis=0)
            ss += tl.sum(d * d, axis=0)
    n = tl.minimum(group_size - i * CHUNK, CHUNK).to(tl.float32)
    mean = mean_of(tl.sum(s, axis=0), tl.sum(sd, axis=0), shift, n)
    m2 = tl.maximum(tl.sum(ss, axis=0) - n * (mean - shift) * (mean - shift), 0.0, propagate_nan=tl.PropagateNan.ALL)
    tl.store(PART + 2 * (g * CHUNKS + i), mean)
    tl.store(PART + 2 * (g * CHUNKS + i) + 1, m2)


@triton.jit
def arrive(ARRIVED, g):
    tl.debug_barrier()  # the whole program's stores precede its arrival
    tl.atomic_add(ARRIVED + g, 1, sem="release", scope="gpu")


@triton.jit
def wait_for_group(ARRIVED, g, CHUNKS: tl.constexpr):
    arrived = tl.atomic_add(ARRIVED + g, 0, sem="acquire", scope="gpu")
    while arrived < CHUNKS:
        arrived = tl.atomic_add(ARRIVED + g, 0, sem="acquire", scope="gpu")


@triton.jit
def group_stats(PART, g, group_size, eps, CHUNK: tl.constexpr, CHUNKS: tl.constexpr, CHUNKS_P2: tl.constexpr,
                FROM_L2: tl.constexpr):
    # Group g's mean and rstd from its chunks' (mean, M2) partials in PART (Chan's formula).
    j = tl.arange(0, CHUNKS_P2)
    ok = j < CHUNKS
    part = PART + 2 * (g * CHUNKS + j)
    if FROM_L2:  # written by other SMs in this same launch: from L2, never from a stale L1 line
        means = tl.load(part, mask=ok, other=0.0, cache_modifier=".cg")
        m2s = tl.load(part + 1, mask=ok, other=0.0, cache_modifier=".cg")
    else:
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
def chunk_apply(X, W, B, Y, PART, MEAN, RSTD, g, i, group_size, hw, eps, CHUNK: tl.constexpr,
                BLOCK: tl.constexpr, UNROLL: tl.constexpr, CHUNKS: tl.constexpr, CHUNKS_P2: tl.constexpr,
                FROM_L2: tl.constexpr, GROUPS: tl.constexpr, CG: tl.constexpr, IN_CHANNEL: tl.constexpr,
                HAS_W: tl.constexpr, HAS_B: tl.constexpr, EVICT: tl.constexpr):
    # Pass 2 of chunk i of group g: the group's statistics from its chunks' partials (every
    # program of the group does the same small sum: cheaper than a launch of its own), then
    # normalise the chunk, UNROLL blocks a trip as one [UNROLL, BLOCK] tile, all loaded before
    # any is used.
    mean, rstd = group_stats(PART, g, group_size, eps, CHUNK, CHUNKS, CHUNKS_P2, FROM_L2)
    tl.store(MEAN + g, mean.to(MEAN.dtype.element_ty), mask=i == 0)
    tl.store(RSTD + g, rstd.to(RSTD.dtype.element_ty), mask=i == 0)
    base = g.to(tl.int64) * group_size
    c0 = (g % GROUPS) * CG
    for off in range(0, CHUNK, BLOCK * UNROLL):
        start = i * CHUNK + off
        if UNROLL == 1:
            idx = start + tl.arange(0, BLOCK)
        else:
            idx = start + tl.arange(0, UNROLL)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
        ok = idx < group_size
        x = tl.load(X + base + idx, mask=ok, other=0.0, eviction_policy=EVICT).to(tl.float32)
        # HxW a multiple of the tile: a tile lies inside one channel, so w and b are scalars
        c = c0 + start // hw if IN_CHANNEL else c0 + idx // hw
        scale, shift = affine(W, B, c, ok, mean, rstd, IN_CHANNEL, HAS_W, HAS_B)
        tl.store(Y + base + idx, epilogue((x - mean) * scale + shift).to(Y.dtype.element_ty), mask=ok)


@triton.jit
def fill(PTR, n, value, BLOCK: tl.constexpr):
    # The counters start each call at 0, in a launch of their own: the waiting kernel cannot
    # clear them itself without a second wait.
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(PTR + idx, tl.zeros([BLOCK], tl.int32) + value, mask=idx < n)


@triton.jit
def ticket_work(t, n_work, lead):
    # Ticket t -> (pass 1?, work item k), item k being chunk k % CHUNKS of group k // CHUNKS. The
    # first `lead` tickets are pass 1 of items 0..lead-1; then pass 2 of item a and pass 1 of item
    # lead + a alternate; then the last passes 2. Pass 2 of item a comes after pass 1 of every
    # item below lead + a, so of its whole group when lead >= CHUNKS.
    paired = 2 * (n_work - lead)
    u = t - lead
    first = (t < lead) | ((u < paired) & (u % 2 == 1))
    k = tl.where(t < lead, t, tl.where(u < paired, tl.where(u % 2 == 1, lead + u // 2, u // 2),
                                       n_work - lead + (u - paired)))
    return first, k


@triton.jit
def gn_queue(X, W, B, Y, PART, ARRIVED, MEAN, RSTD, n_groups, n_work, lead, group_size, hw, eps,
             CHUNK: tl.constexpr, BLOCK: tl.constexpr, UNROLL: tl.constexpr, CHUNKS: tl.constexpr,
             CHUNKS_P2: tl.constexpr, GROUPS: tl.constexpr, CG: tl.constexpr, IN_CHANNEL: tl.constexpr,
             HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # The ticket counter is ARRIVED[n_groups], after the groups' arrival counts. Each pass 2 sums
    # the group's partials itself: a form in which the group's last pass 1 did it once, for all,
    # was slower on an H200 (0.1062 ms against 0.0995, bench/results/h200/probe/probe8.log).
    ticket = ARRIVED + n_groups
    t = tl.atomic_add(ticket, 1, sem="relaxed")
    while t < 2 * n_work:
        first, k = ticket_work(t, n_work, lead)
        g = k // CHUNKS
        i = k % CHUNKS
        if first:
            chunk_stats(X, PART, g, i, group_size, CHUNK, BLOCK, UNROLL, CHUNKS, "evict_last")
            arrive(ARRIVED, g)
        else:
            wait_for_group(ARRIVED, g, CHUNKS)
            chunk_apply(X, W, B, Y, PART, MEAN, RSTD, g, i, group_size, hw, eps, CHUNK, BLOCK, UNROLL,
                        CHUNKS, CHUNKS_P2, True, GROUPS, CG, IN_CHANNEL, HAS_W, HAS_B, "evict_first")
        t = tl.atomic_add(ticket, 1, sem="relaxed")


@triton.jit
def gn_resident(X, W, B, Y, PART, ARRIVED, MEAN, RSTD, n_groups, wave, group_size, hw, eps,
                CHUNK: tl.constexpr, BLOCK: tl.constexpr, UNROLL: tl.constexpr, CHUNKS: tl.constexpr,
                CHUNKS_P2: tl.constexpr, PHASE: tl.constexpr, PIPELINE: tl.constexpr, GROUPS: tl.constexpr,
                CG: tl.constexpr, IN_CHANNEL: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # PHASE 0 does both passes with the wait; 1 and 2 do one pass each, as two launches, where
    # programs run one after another (the CPU interpreter, or a GPU with too few SMs for a wave).
    pid = tl.program_id(0)
    i = pid % CHUNKS
    if PIPELINE and PHASE == 0:
        # Pass 1 of wave w before pass 2 of wave w - 1: by the time a program needs the last
        # wave's statistics its group has long arrived, so the wait costs one atomic read instead
        # of a stall while the slowest SM catches up, and DRAM reads go on through it. Pass 1
        # asks L2 to keep its lines (evict_last) and pass 2 lets them go (evict_first), as two
        # waves are in L2 at once. One step past the last wave: there only its pass 2 is left.
        prev = pid * 0 - 1
        for g0 in range(0, n_groups + wave, wave):
            g = g0 + pid // CHUNKS
            if g < n_groups:
                chunk_stats(X, PART, g, i, group_size, CHUNK, BLOCK, UNROLL, CHUNKS, "evict_last")
                arrive(ARRIVED, g)
            if (prev >= 0) & (prev < n_groups):
                wait_for_group(ARRIVED, prev, CHUNKS)
                chunk_apply(X, W, B, Y, PART, MEAN, RSTD, prev, i, group_size, hw, eps, CHUNK, BLOCK, UNROLL,
                            CHUNKS, CHUNKS_P2, True, GROUPS, CG, IN_CHANNEL, HAS_W, HAS_B, "evict_first")
            prev = g
    else:
        for g0 in range(0, n_groups, wave):
            g = g0 + pid // CHUNKS
            if g < n_groups:
                if PHASE != 2:
                    chunk_stats(X, PART, g, i, group_size, CHUNK, BLOCK, UNROLL, CHUNKS, "")
                if PHASE == 0:
                    arrive(ARRIVED, g)
                    wait_for_group(ARRIVED, g, CHUNKS)
                if PHASE != 1:
                    chunk_apply(X, W, B, Y, PART, MEAN, RSTD, g, i, group_size, hw, eps, CHUNK, BLOCK, UNROLL,
                                CHUNKS, CHUNKS_P2, PHASE == 0, GROUPS, CG, IN_CHANNEL, HAS_W, HAS_B, "")


_SMS = {}


def sm_count(device):
    # the interpreter runs on the CPU: a few programs, so that persistent loops run more than once
    if device not in _SMS:
        _SMS[device] = (torch.cuda.get_device_properties(device).multi_processor_count
                        if device.type == "cuda" else 4)
    return _SMS[device]


def launch(x, w, b, y, mean, rstd):
    chunks = triton.cdiv(GROUP_SIZE, CHUNK)
    tiles = dict(CHUNK=CHUNK, BLOCK=BLOCK, UNROLL=UNROLL, CHUNKS=chunks, CHUNKS_P2=triton.next_power_of_2(chunks),
                 GROUPS=GROUPS, CG=CG, IN_CHANNEL=HW % (BLOCK * UNROLL) == 0, HAS_W=HAS_W, HAS_B=HAS_B,
                 num_warps=NUM_WARPS)
    if SCHEDULE == "queue":
        launch_queue(x, w, b, y, mean, rstd, chunks, tiles)
    else:
        launch_resident(x, w, b, y, mean, rstd, chunks, tiles)


def launch_queue(x, w, b, y, mean, rstd, chunks, tiles):
    n_work = N_GROUPS * chunks
    part = torch.empty((2 * n_work,), dtype=torch.float32, device=x.device)
    counters = torch.empty((N_GROUPS + 1,), dtype=torch.int32, device=x.device)  # arrivals, then the ticket
    fill[(triton.cdiv(N_GROUPS + 1, 1024),)](counters, N_GROUPS + 1, 0, BLOCK=1024)
    programs = min(n_work, PER_SM * sm_count(x.device))
    gn_queue[(programs,)](x, w, b, y, part, counters, mean, rstd, N_GROUPS, n_work, min(LEAD * chunks, n_work),
                          GROUP_SIZE, HW, EPS, **tiles)


def launch_resident(x, w, b, y, mean, rstd, chunks, tiles):
    slots = PER_SM * sm_count(x.device)
    wave = max(1, min(N_GROUPS, slots // chunks))  # groups per wave: every program resident at once
    part = torch.empty((2 * N_GROUPS * chunks,), dtype=torch.float32, device=x.device)
    arrived = torch.empty((N_GROUPS,), dtype=torch.int32, device=x.device)
    args = (x, w, b, y, part, arrived, mean, rstd, N_GROUPS, wave, GROUP_SIZE, HW, EPS)
    tiles = dict(tiles, PIPELINE=PIPELINE)
    if x.device.type == "cuda" and chunks <= slots:
        fill[(triton.cdiv(N_GROUPS, 1024),)](arrived, N_GROUPS, 0, BLOCK=1024)
        # One program per SM always fits once it compiles. Two might not (registers, shared
        # memory): a cooperative launch refuses a grid that cannot be resident all at once,
        # where a plain one would leave programs waiting for SMs that never free up.
        gn_resident[(wave * chunks,)](*args, PHASE=0, launch_cooperative_grid=PER_SM > 1, **tiles)
    else:  # programs that cannot all be resident would wait forever: one launch per pass instead
        gn_resident[(wave * chunks,)](*args, PHASE=1, **tiles)
        gn_resident[(wave * chunks,)](*args, PHASE=2, **tiles)


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
