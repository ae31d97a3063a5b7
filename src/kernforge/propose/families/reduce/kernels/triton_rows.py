"""kernforge builtin: a reduction (sum, mean, amax, amin) along rows: x viewed as [OUTER, R].

kf-op: aten::sum.dim_IntList

The reduced dims are the innermost in memory, so each output reduces one contiguous row of
R elements, accumulated in float32. ROWS_PER_PROGRAM short rows share a [ROWS, BLOCK_R] tile:
one contiguous run of x, so short rows still make long loads. A row longer than BLOCK_R is
read in a loop. With SPLIT > 1 (few long rows, too few programs to fill the SMs) each row is
cut into SPLIT parts: each program writes a float32 partial and a second small kernel
combines a row's partials in a fixed order, so the result is the same on every call.
"""
import torch
import triton
import triton.language as tl

# kf-constants: begin
OP = "sum"
OUT_SHAPE = [6, 5]
OUT_STRIDE = [5, 1]
OUTER = 30
R = 37
ROWS_PER_PROGRAM = 4
SPLIT = 1
BLOCK_R = 64
NUM_WARPS = 4
# kf-constants: end


# kf-include: shared_triton.py


@triton.jit
def reduce_rows(X, OUT, N_ROWS: tl.constexpr, N_RED: tl.constexpr, ROWS: tl.constexpr, BLOCK_R: tl.constexpr,
                CHUNK: tl.constexpr, SPLIT: tl.constexpr, OP: tl.constexpr, INIT: tl.constexpr):
    # Program (i, part): rows i * ROWS ... of x, elements part * CHUNK ... of each.
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < N_ROWS
    part = tl.program_id(1)
    base = X + rows.to(tl.int64)[:, None] * N_RED
    cols = tl.arange(0, BLOCK_R)[None, :]
    acc = tl.full([ROWS, BLOCK_R], INIT, tl.float32)
    lost = tl.zeros([ROWS, BLOCK_R], tl.float32)
    for start in range(part * CHUNK, (part + 1) * CHUNK, BLOCK_R):
        c = start + cols
        x = tl.load(base + c, mask=row_ok[:, None] & (c < N_RED), other=INIT)
        acc, lost = accumulate(acc, lost, x.to(tl.float32), OP)
    if OP == "amax" or OP == "amin":
        total = reduce_tile(acc, 1, OP)
    else:
        total = reduce_tile(acc - lost, 1, OP)
    if SPLIT == 1:
        tl.store(OUT + rows, finish(total, N_RED, OP).to(OUT.dtype.element_ty), mask=row_ok)
    else:
        tl.store(OUT + rows * SPLIT + part, total, mask=row_ok)  # a float32 partial


@triton.jit
def combine_parts(P, Y, N_OUT: tl.constexpr, N_RED: tl.constexpr, SPLIT: tl.constexpr, BLOCK: tl.constexpr,
                  OP: tl.constexpr, INIT: tl.constexpr):
    # The SPLIT partials of BLOCK outputs, laid out [N_OUT, SPLIT], reduced in a fixed order.
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < N_OUT
    parts = tl.arange(0, SPLIT)[None, :]
    p = tl.load(P + idx[:, None] * SPLIT + parts, mask=ok[:, None], other=INIT)
    total = reduce_tile(p, 1, OP)
    tl.store(Y + idx, finish(total, N_RED, OP).to(Y.dtype.element_ty), mask=ok)


def kf_forward(x, *args, **kwargs):
    # The dims and keepdim are the task's: y's shape and strides are eager's.
    y = torch.empty_strided(OUT_SHAPE, OUT_STRIDE, dtype=x.dtype, device=x.device)
    chunk = triton.cdiv(triton.cdiv(R, SPLIT), BLOCK_R) * BLOCK_R
    out = y if SPLIT == 1 else torch.empty((OUTER * SPLIT,), dtype=torch.float32, device=x.device)
    reduce_rows[(triton.cdiv(OUTER, ROWS_PER_PROGRAM), SPLIT)](
        x, out, N_ROWS=OUTER, N_RED=R, ROWS=ROWS_PER_PROGRAM, BLOCK_R=BLOCK_R, CHUNK=chunk, SPLIT=SPLIT,
        OP=OP, INIT=identity(OP), num_warps=NUM_WARPS)
    if SPLIT > 1:
        block = max(1, 2048 // SPLIT)
        combine_parts[(triton.cdiv(OUTER, block),)](out, y, N_OUT=OUTER, N_RED=R, SPLIT=SPLIT, BLOCK=block,
                                                     OP=OP, INIT=identity(OP), num_warps=4)
    return y
