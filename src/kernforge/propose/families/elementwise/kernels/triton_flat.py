"""kernforge builtin: an element-wise op y = op(a, b), BLOCK output elements per program.

kf-op: aten::add.Tensor

The output is walked flat in its own memory order over its merged dims SIZES (outermost
first). An operand laid out like the output ("same") is read at the output's offsets: one
vectorised load. A broadcast or otherwise strided one ("strided") is read at offsets from
its strides over SIZES (0 where it is broadcast); a 0-dim one ("scalar") once per program;
"none" is a number baked into op() or no second operand. Values are fp32 in op(), rounded
once at the store. PROGRAMS_PER_SM 0 is one program per block; otherwise that many programs
per SM loop over the blocks.
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
SIZES = (1, 1, 1, 185)
OUT_SHAPE = (5, 37)
OUT_STRIDE = (37, 1)
A_KIND = 'same'
A_STRIDES = (0, 0, 0, 1)
A_SHAPE = (5, 37)
A_STRIDE = (37, 1)
B_KIND = 'same'
B_STRIDES = (0, 0, 0, 1)
B_SHAPE = (5, 37)
B_STRIDE = (37, 1)
INT64 = False
BLOCK = 256
NUM_WARPS = 2
PROGRAMS_PER_SM = 0
# kf-constants: end

@triton.jit
def strided_offset(i, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr,
                   T0: tl.constexpr, T1: tl.constexpr, T2: tl.constexpr, T3: tl.constexpr):
    # Where output element i (counted in memory order over [S0, S1, S2, S3]) lies in an operand
    # of strides [T0, T1, T2, T3]; a dim of size 1 or stride 0 folds away at compile time.
    off = (i % S3) * T3
    i = i // S3
    off += (i % S2) * T2
    i = i // S2
    return off + (i % S1) * T1 + (i // S1) * T0


@triton.jit
def load(P, idx, mask, EVEN: tl.constexpr, KIND: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr,
         S3: tl.constexpr, T0: tl.constexpr, T1: tl.constexpr, T2: tl.constexpr, T3: tl.constexpr):
    """An operand's values at output elements idx, in fp32."""
    if KIND == "scalar":
        v = tl.load(P).to(tl.float32)
    else:
        if KIND == "same":
            off = idx
        else:
            off = strided_offset(idx, S1, S2, S3, T0, T1, T2, T3)
        if EVEN:  # a whole number of blocks: unpredicated vector accesses
            v = tl.load(P + off).to(tl.float32)
        else:
            v = tl.load(P + off, mask=mask).to(tl.float32)
    return v


@triton.jit
def elementwise_flat(A, B, Y, NUMEL: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr,
                     A_KIND: tl.constexpr, A0: tl.constexpr, A1: tl.constexpr, A2: tl.constexpr,
                     A3: tl.constexpr, B_KIND: tl.constexpr, B0: tl.constexpr, B1: tl.constexpr,
                     B2: tl.constexpr, B3: tl.constexpr, INT64: tl.constexpr, BLOCK: tl.constexpr):
    EVEN = NUMEL % BLOCK == 0
    # one trip for one program per block; a persistent grid strides over the blocks
    for tile in range(tl.program_id(0), (NUMEL + BLOCK - 1) // BLOCK, tl.num_programs(0)):
        if INT64:  # offsets past 2^31 elements
            first = tl.cast(tile, tl.int64) * BLOCK
        else:
            first = tile * BLOCK
        idx = first + tl.arange(0, BLOCK)
        mask = idx < NUMEL
        a = load(A, idx, mask, EVEN, A_KIND, S1, S2, S3, A0, A1, A2, A3)
        if B_KIND == "none":
            b = 0.0
        else:
            b = load(B, idx, mask, EVEN, B_KIND, S1, S2, S3, B0, B1, B2, B3)
        y = op(a, b).to(Y.dtype.element_ty)
        if EVEN:
            tl.store(Y + idx, y)
        else:
            tl.store(Y + idx, y, mask=mask)


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
    tiles = triton.cdiv(NUMEL, BLOCK)
    grid = (min(tiles, sm_count(y.device) * PROGRAMS_PER_SM) if PROGRAMS_PER_SM else tiles,)
    elementwise_flat[grid](x, other, y, NUMEL, *SIZES[1:], A_KIND, *A_STRIDES, B_KIND, *B_STRIDES, INT64, BLOCK,
                           num_warps=NUM_WARPS)
    return y
