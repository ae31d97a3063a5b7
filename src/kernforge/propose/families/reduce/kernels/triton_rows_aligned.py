"""kernforge builtin: a reduction (sum, mean, amax, amin) of short rows, loaded from 16-byte boundaries.

kf-op: aten::mean.dim

x viewed as [OUTER, R], R not a multiple of 16 bytes (ResNet-50's global average pool: rows of
49 floats, 3 rows in 4 starting off a boundary), which defeats vector loads. Each tile row
starts at its row's start rounded down to ALIGN elements, loads BLOCK_R >= R + ALIGN - 1
elements with 16-byte loads and masks off what is not its row after loading. On an H200,
mean over (256, 2048, 7, 7) fp32 took 0.035 ms this way against 0.049 ms with the plain
[ROWS, 64] tile; bf16 0.025 ms against 0.049 ms.
"""
import torch
import triton
import triton.language as tl

# kf-constants: begin
OP = "mean"
OUT_SHAPE = [6, 5, 1, 1]
OUT_STRIDE = [5, 1, 1, 1]
OUTER = 30
R = 49
ALIGN = 4
ROWS_PER_PROGRAM = 8
BLOCK_R = 64
NUM_WARPS = 4
# kf-constants: end


# kf-include: shared_triton.py


@triton.jit
def reduce_rows_aligned(X, Y, N_ROWS: tl.constexpr, N_RED: tl.constexpr, ROWS: tl.constexpr,
                        BLOCK_R: tl.constexpr, ALIGN: tl.constexpr, OP: tl.constexpr, INIT: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    start = rows.to(tl.int64) * N_RED
    base = (start // ALIGN) * ALIGN  # a multiple of ALIGN: the loads below are whole vectors
    lo = (start - base)[:, None]  # where the row begins in its tile row
    cols = tl.arange(0, BLOCK_R)[None, :]
    offs = base[:, None] + cols
    x = tl.load(X + offs, mask=offs < N_ROWS * N_RED, other=INIT).to(tl.float32)
    acc = tl.where((cols >= lo) & (cols < lo + N_RED), x, INIT)
    total = reduce_tile(acc, 1, OP)
    tl.store(Y + rows, finish(total, N_RED, OP).to(Y.dtype.element_ty), mask=rows < N_ROWS)


def kf_forward(x, *args, **kwargs):
    # The dims and keepdim are the task's: y's shape and strides are eager's.
    y = torch.empty_strided(OUT_SHAPE, OUT_STRIDE, dtype=x.dtype, device=x.device)
    reduce_rows_aligned[(triton.cdiv(OUTER, ROWS_PER_PROGRAM),)](
        x, y, N_ROWS=OUTER, N_RED=R, ROWS=ROWS_PER_PROGRAM, BLOCK_R=BLOCK_R, ALIGN=ALIGN, OP=OP,
        INIT=identity(OP), num_warps=NUM_WARPS)
    return y
