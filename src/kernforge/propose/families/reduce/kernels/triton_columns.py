"""kernforge builtin: a reduction (sum, mean, amax, amin) over columns: x viewed as [OUTER, R, INNER].

kf-op: aten::sum.dim_IntList

y[o, i] = op over r of x[o, r, i], accumulated in float32: the first dim, a middle dim, or H, W
of a channels-last tensor (INNER = C), with INNER contiguous. A program owns BLOCK_C inner
positions of one o: each step of its loop over R loads a [BLOCK_R, BLOCK_C] tile, BLOCK_R rows
in flight, each row a contiguous run of BLOCK_C elements (coalesced; 16-byte loads when INNER
is a multiple of 16 bytes). With SPLIT > 1 (too few tiles of OUTER x INNER to fill the SMs,
the middle dim of (8, 4096, 2047) makes 64 of 256 floats) R is cut into SPLIT parts: each
program writes a float32 partial, laid out [OUTER, SPLIT, INNER], and a second small kernel
combines them in a fixed order, so the result is the same on every call.
"""
import torch
import triton
import triton.language as tl

# kf-constants: begin
OP = "sum"
OUT_SHAPE = [3, 37]
OUT_STRIDE = [37, 1]
OUTER = 3
R = 50
INNER = 37
SPLIT = 1
BLOCK_R = 8
BLOCK_C = 32
NUM_WARPS = 2
NUM_STAGES = 3
# kf-constants: end


# kf-include: shared_triton.py


@triton.jit
def reduce_columns(X, OUT, N_RED: tl.constexpr, INNER: tl.constexpr, BLOCK_R: tl.constexpr,
                   BLOCK_C: tl.constexpr, CHUNK: tl.constexpr, SPLIT: tl.constexpr, OP: tl.constexpr,
                   INIT: tl.constexpr, NUM_STAGES: tl.constexpr):
    # Program (tile, part): tile = o * blocks + the block of inner positions; part of R.
    blocks = tl.cdiv(INNER, BLOCK_C)
    tile = tl.program_id(0)
    o = (tile // blocks).to(tl.int64)
    cols = (tile % blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < INNER
    part = tl.program_id(1)
    base = X + o * (N_RED * INNER) + cols[None, :]
    r = tl.arange(0, BLOCK_R)[:, None]
    acc = tl.full([BLOCK_R, BLOCK_C], INIT, tl.float32)
    lost = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)
    for start in tl.range(part * CHUNK, (part + 1) * CHUNK, BLOCK_R, num_stages=NUM_STAGES):
        rows = (start + r).to(tl.int64)
        x = tl.load(base + rows * INNER, mask=(rows < N_RED) & col_ok[None, :], other=INIT)
        acc, lost = accumulate(acc, lost, x.to(tl.float32), OP)
    if OP == "amax" or OP == "amin":
        total = reduce_tile(acc, 0, OP)
    else:
        total = reduce_tile(acc - lost, 0, OP)
    if SPLIT == 1:
        tl.store(OUT + o * INNER + cols, finish(total, N_RED, OP).to(OUT.dtype.element_ty), mask=col_ok)
    else:
        tl.store(OUT + (o * SPLIT + part) * INNER + cols, total, mask=col_ok)  # a float32 partial


@triton.jit
def combine_parts(P, Y, N_OUT: tl.constexpr, N_RED: tl.constexpr, INNER: tl.constexpr, SPLIT: tl.constexpr,
                  BLOCK: tl.constexpr, OP: tl.constexpr, INIT: tl.constexpr):
    # The SPLIT partials of BLOCK outputs y[o, i], at P[o, part, i], reduced in a fixed order.
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < N_OUT
    first = (idx // INNER) * (SPLIT * INNER) + idx % INNER
    parts = tl.arange(0, SPLIT)[None, :] * INNER
    p = tl.load(P + first[:, None] + parts, mask=ok[:, None], other=INIT)
    total = reduce_tile(p, 1, OP)
    tl.store(Y + idx, finish(total, N_RED, OP).to(Y.dtype.element_ty), mask=ok)


def kf_forward(x, *args, **kwargs):
    # The dims and keepdim are the task's: y's shape and strides are eager's.
    y = torch.empty_strided(OUT_SHAPE, OUT_STRIDE, dtype=x.dtype, device=x.device)
    chunk = triton.cdiv(triton.cdiv(R, SPLIT), BLOCK_R) * BLOCK_R
    out = y if SPLIT == 1 else torch.empty((OUTER * SPLIT * INNER,), dtype=torch.float32, device=x.device)
    reduce_columns[(OUTER * triton.cdiv(INNER, BLOCK_C), SPLIT)](
        x, out, N_RED=R, INNER=INNER, BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C, CHUNK=chunk, SPLIT=SPLIT, OP=OP,
        INIT=identity(OP), NUM_STAGES=NUM_STAGES, num_warps=NUM_WARPS)
    if SPLIT > 1:
        block = max(1, 2048 // SPLIT)
        combine_parts[(triton.cdiv(OUTER * INNER, block),)](
            out, y, N_OUT=OUTER * INNER, N_RED=R, INNER=INNER, SPLIT=SPLIT, BLOCK=block, OP=OP,
            INIT=identity(OP), num_warps=4)
    return y
