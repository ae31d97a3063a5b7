"""kernforge builtin: a reduction (sum, mean, amax, amin) over two separate blocks of dims.

kf-op: aten::sum.dim_IntList

x viewed as [OUTER, R1, MID, R2, INNER] in memory order (dims [0, 2] of a 3-D tensor: OUTER =
INNER = 1), reduced over R1 and R2: y[o, m, i] = op over (r1, r2) of x[o, r1, m, r2, i],
accumulated in float32. A program owns BLOCK_C inner positions of one (o, m) and walks the
R1 x R2 reduced positions BLOCK_R at a time, splitting each flat index into (r1, r2); with
INNER == 1 the BLOCK_R positions of one step are mostly one contiguous run of R2.
"""
import torch
import triton
import triton.language as tl

# kf-constants: begin
OP = "sum"
OUT_SHAPE = [5]
OUT_STRIDE = [1]
OUTER = 1
R1 = 3
MID = 5
R2 = 7
INNER = 1
BLOCK_R = 32
BLOCK_C = 1
NUM_WARPS = 1
# kf-constants: end


# kf-include: shared_triton.py


@triton.jit
def reduce_two_blocks(X, Y, R1: tl.constexpr, MID: tl.constexpr, R2: tl.constexpr, INNER: tl.constexpr,
                      BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, OP: tl.constexpr, INIT: tl.constexpr):
    blocks = tl.cdiv(INNER, BLOCK_C)
    tile = tl.program_id(0)
    om = (tile // blocks).to(tl.int64)  # o * MID + m: the output run y[o, m, :]
    o = om // MID
    m = om % MID
    cols = (tile % blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < INNER
    base = X + o * (R1 * MID * R2 * INNER) + m * (R2 * INNER) + cols[None, :]
    r = tl.arange(0, BLOCK_R)[:, None]
    acc = tl.full([BLOCK_R, BLOCK_C], INIT, tl.float32)
    lost = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)
    for start in range(0, R1 * R2, BLOCK_R):
        flat = (start + r).to(tl.int64)
        offs = (flat // R2) * (MID * R2 * INNER) + (flat % R2) * INNER
        x = tl.load(base + offs, mask=(flat < R1 * R2) & col_ok[None, :], other=INIT)
        acc, lost = accumulate(acc, lost, x.to(tl.float32), OP)
    if OP == "amax" or OP == "amin":
        total = reduce_tile(acc, 0, OP)
    else:
        total = reduce_tile(acc - lost, 0, OP)
    tl.store(Y + om * INNER + cols, finish(total, R1 * R2, OP).to(Y.dtype.element_ty), mask=col_ok)


def kf_forward(x, *args, **kwargs):
    # The dims and keepdim are the task's: y's shape and strides are eager's.
    y = torch.empty_strided(OUT_SHAPE, OUT_STRIDE, dtype=x.dtype, device=x.device)
    reduce_two_blocks[(OUTER * MID * triton.cdiv(INNER, BLOCK_C),)](
        x, y, R1=R1, MID=MID, R2=R2, INNER=INNER, BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C, OP=OP, INIT=identity(OP),
        num_warps=NUM_WARPS)
    return y
