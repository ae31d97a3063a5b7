"""kernforge builtin: an element-wise op y = op(a, b) on [rows, cols] tiles of BLOCK elements.

kf-op: aten::add.Tensor

The output, in its own memory order over its merged dims SIZES (outermost first), is seen as
[rows, cols] with cols its innermost merged dim; a program computes a [BLOCK_R, BLOCK_C]
tile. A broadcast operand's offsets are computed once per row instead of per element, and
one constant along a row (stride 0 there) or the same for every row is loaded as a column
or a row of the tile and broadcast. "same" operands are read at the output's offsets,
"scalar" ones once per program; "none" is a number baked into op() or no second operand.
PROGRAMS_PER_SM 0 is one program per tile; otherwise that many programs per SM loop over
the tiles.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def kf_tanh(x):
    # triton has no tl.tanh in 3.6. Cephes' tanhf: an odd polynomial below |x| = 0.625, where
    # 1 - e^-2|x| would cancel (3% off at 1e-2); above, 1 - 2t/(1+t) with t = e^-2|x| (no overflow)
    a = tl.abs(x)
    z = a * a
    p = ((((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z
          + 1.33314422036e-1) * z - 3.33332819422e-1) * z * a + a
    t = tl.exp(-2.0 * a)
    r = tl.where(a < 0.625, p, 1.0 - 2.0 * t / (1.0 + t))
    return tl.where(x < 0.0, -r, r)


# kf-constants: begin
@triton.jit
def op(a, b):
    return a + b

NUMEL = 185
SIZES = (1, 1, 5, 37)
OUT_SHAPE = (5, 37)
OUT_STRIDE = (37, 1)
A_KIND = 'same'
A_STRIDES = (0, 0, 37, 1)
A_SHAPE = (5, 37)
A_STRIDE = (37, 1)
B_KIND = 'strided'
B_STRIDES = (0, 0, 0, 1)
B_SHAPE = (37,)
B_STRIDE = (1,)
INT64 = False
BLOCK = 256
NUM_WARPS = 2
PROGRAMS_PER_SM = 0
# kf-constants: end

@triton.jit
def row_offset(r, S1: tl.constexpr, S2: tl.constexpr, T0: tl.constexpr, T1: tl.constexpr, T2: tl.constexpr):
    # Where row r (counted over the outer dims [S0, S1, S2]) starts in an operand of strides
    # [T0, T1, T2] over them; a dim of size 1 or stride 0 folds away at compile time.
    off = (r % S2) * T2
    r = r // S2
    return off + (r % S1) * T1 + (r // S1) * T0


@triton.jit
def load_tile(P, r, c, rmask, cmask, KIND: tl.constexpr, COLS: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr,
              T0: tl.constexpr, T1: tl.constexpr, T2: tl.constexpr, T3: tl.constexpr):
    """An operand's values on the tile's rows r and columns c, in fp32 (a [BLOCK_R, 1] column or
    a [1, BLOCK_C] row where it is constant along the other)."""
    if KIND == "scalar":
        v = tl.load(P).to(tl.float32)
    elif KIND == "same":
        v = tl.load(P + (r * COLS)[:, None] + c[None, :], mask=rmask[:, None] & cmask[None, :]).to(tl.float32)
    elif T3 == 0:  # constant along a row: one value per row
        v = tl.load(P + row_offset(r, S1, S2, T0, T1, T2), mask=rmask).to(tl.float32)[:, None]
    elif T0 == 0 and T1 == 0 and T2 == 0:  # every row the same: one row per tile
        v = tl.load(P + c * T3, mask=cmask).to(tl.float32)[None, :]
    else:
        v = tl.load(P + row_offset(r, S1, S2, T0, T1, T2)[:, None] + (c * T3)[None, :],
                    mask=rmask[:, None] & cmask[None, :]).to(tl.float32)
    return v


@triton.jit
def elementwise_tile2d(A, B, Y, ROWS: tl.constexpr, COLS: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr,
                       A_KIND: tl.constexpr, A0: tl.constexpr, A1: tl.constexpr, A2: tl.constexpr,
                       A3: tl.constexpr, B_KIND: tl.constexpr, B0: tl.constexpr, B1: tl.constexpr,
                       B2: tl.constexpr, B3: tl.constexpr, INT64: tl.constexpr, BLOCK_R: tl.constexpr,
                       BLOCK_C: tl.constexpr):
    COL_TILES = (COLS + BLOCK_C - 1) // BLOCK_C
    TILES = (ROWS + BLOCK_R - 1) // BLOCK_R * COL_TILES
    # one trip for one program per tile; a persistent grid strides over the tiles
    for tile in range(tl.program_id(0), TILES, tl.num_programs(0)):
        if INT64:  # offsets past 2^31 elements
            t = tl.cast(tile, tl.int64)
        else:
            t = tile
        r = (t // COL_TILES) * BLOCK_R + tl.arange(0, BLOCK_R)
        c = (t % COL_TILES) * BLOCK_C + tl.arange(0, BLOCK_C)
        rmask = r < ROWS
        cmask = c < COLS
        a = load_tile(A, r, c, rmask, cmask, A_KIND, COLS, S1, S2, A0, A1, A2, A3)
        if B_KIND == "none":
            b = 0.0
        else:
            b = load_tile(B, r, c, rmask, cmask, B_KIND, COLS, S1, S2, B0, B1, B2, B3)
        y = op(a, b).to(Y.dtype.element_ty)
        tl.store(Y + (r * COLS)[:, None] + c[None, :], y, mask=rmask[:, None] & cmask[None, :])


_SMS = {}


def sm_count(device):
    # the interpreter runs on the CPU: a few programs, so that persistent loops run more than once
    if device not in _SMS:
        _SMS[device] = (torch.cuda.get_device_properties(device).multi_processor_count
                        if device.type == "cuda" else 4)
    return _SMS[device]


def _expect(t, shape, stride):
    # Shapes and strides are baked into the kernel: another layout would be read wrongly.
    if tuple(t.shape) != shape or t.stride() != stride:
        raise ValueError(f"built for shape {shape} and strides {stride}, got {tuple(t.shape)} and {t.stride()}")


def kf_forward(x, *rest, **kwargs):
    # Number arguments and keyword-only ones (alpha, approximate) are baked into op().
    other = rest[0] if B_KIND != "none" else x  # x stands in for a B that is never read
    _expect(x, A_SHAPE, A_STRIDE)
    if B_KIND != "none":
        _expect(other, B_SHAPE, B_STRIDE)
    # a 0-dim tensor takes no part in type promotion: y has the dtype of the full-size operand
    dtype = other.dtype if x.ndim == 0 and len(OUT_SHAPE) > 0 else x.dtype
    y = torch.empty_strided(OUT_SHAPE, OUT_STRIDE, dtype=dtype, device=x.device)
    # The tile: whole rows where they fit in BLOCK, else BLOCK columns of one row.
    cols = SIZES[-1]
    rows = NUMEL // cols
    block_c = min(triton.next_power_of_2(cols), BLOCK)
    block_r = BLOCK // block_c
    tiles = triton.cdiv(rows, block_r) * triton.cdiv(cols, block_c)
    grid = (min(tiles, sm_count(y.device) * PROGRAMS_PER_SM) if PROGRAMS_PER_SM else tiles,)
    elementwise_tile2d[grid](x, other, y, rows, cols, *SIZES[1:3], A_KIND, *A_STRIDES, B_KIND, *B_STRIDES, INT64,
                             block_r, block_c, num_warps=NUM_WARPS)
    return y
