"""kernforge builtin: 2-D max pooling with indices (max_pool2d_with_indices), one output per lane.

kf-op: aten::max_pool2d_with_indices.default

y[n, c, oh, ow] = the largest x[n, c, ih, iw] over the window of (oh, ow), and i[...] its
position ih * W + iw in the plane. The window's rows are oh * SH - PH + k * DH for k < KH
(dilation DH), those inside the input only (padding acts as -inf), the same for columns.
Eager's rules: positions are scanned row by row and the first of equal maxima wins; a NaN wins
over any number (the last NaN seen); a window of -inf gives -inf at its first position inside
the input. Outputs are numbered in the output's memory order: coalesced stores, and in
channels-last neighbouring lanes read neighbouring channels. The window's KH x KW positions
are unrolled (UNROLL) or looped over.
"""
import torch
import triton
import triton.language as tl

# kf-constants: begin
N = 2
C = 3
H = 9
W = 11
OH = 5
OW = 6
KH = 3
KW = 3
SH = 2
SW = 2
PH = 1
PW = 1
DH = 1
DW = 1
CHANNELS_LAST = False
OUT_SHAPE = [2, 3, 5, 6]
OUT_STRIDE = [90, 30, 6, 1]
INDEX_64 = False
BLOCK = 256
NUM_WARPS = 4
UNROLL = True
# kf-constants: end


@triton.jit
def first_inside(o, S: tl.constexpr, P: tl.constexpr, D: tl.constexpr):
    """The window's first row (or column) inside the input: its start stepped by the dilation."""
    lo = o * S - P
    return tl.where(lo < 0, lo + ((D - 1 - lo) // D) * D, lo)


@triton.jit
def take(best, at, v, pos, m):
    """Eager's choice: a larger value, or any NaN, replaces the best so far."""
    better = m & ((v > best) | (v != v))
    return tl.where(better, v, best), tl.where(better, pos, at)


@triton.jit
def max_pool2d(X, Y, I, N: tl.constexpr, C: tl.constexpr, H: tl.constexpr, W: tl.constexpr,
               OH: tl.constexpr, OW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
               SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
               DH: tl.constexpr, DW: tl.constexpr, CHANNELS_LAST: tl.constexpr, INDEX_64: tl.constexpr,
               BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < N * C * OH * OW
    if INDEX_64:  # int64 offsets only where int32 cannot address the tensors
        idx = idx.to(tl.int64)
    if CHANNELS_LAST:
        c = idx % C
        ow = (idx // C) % OW
        oh = (idx // (C * OW)) % OH
        n = idx // (C * OW * OH)
        base = n * (H * W * C) + c
        pixel = C  # elements between neighbouring pixels
    else:
        ow = idx % OW
        oh = (idx // OW) % OH
        plane = idx // (OW * OH)
        base = plane * (H * W)
        pixel = 1
    h0 = oh * SH - PH  # the window's first row, maybe in the padding
    w0 = ow * SW - PW
    best = tl.full([BLOCK], -float("inf"), tl.float32)
    at = (first_inside(oh, SH, PH, DH) * W + first_inside(ow, SW, PW, DW)).to(tl.int64)
    if UNROLL:
        for dh in tl.static_range(KH):
            for dw in tl.static_range(KW):
                ih, iw = h0 + dh * DH, w0 + dw * DW
                m = ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                v = tl.load(X + base + (ih * W + iw) * pixel, mask=m, other=-float("inf")).to(tl.float32)
                best, at = take(best, at, v, (ih * W + iw).to(tl.int64), m)
    else:
        for dh in range(KH):
            for dw in range(KW):
                ih, iw = h0 + dh * DH, w0 + dw * DW
                m = ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                v = tl.load(X + base + (ih * W + iw) * pixel, mask=m, other=-float("inf")).to(tl.float32)
                best, at = take(best, at, v, (ih * W + iw).to(tl.int64), m)
    tl.store(Y + idx, best.to(Y.dtype.element_ty), mask=ok)
    tl.store(I + idx, at, mask=ok)


def kf_forward(x, *args):
    # The window's size, stride, padding and dilation are baked into the constants; the outputs
    # have eager's shape and strides (dense in the input's order: output k is element k).
    y = torch.empty_strided(OUT_SHAPE, OUT_STRIDE, dtype=x.dtype, device=x.device)
    indices = torch.empty_strided(OUT_SHAPE, OUT_STRIDE, dtype=torch.int64, device=x.device)
    grid = (triton.cdiv(N * C * OH * OW, BLOCK),)
    max_pool2d[grid](x, y, indices, N=N, C=C, H=H, W=W, OH=OH, OW=OW, KH=KH, KW=KW, SH=SH, SW=SW, PH=PH,
                     PW=PW, DH=DH, DW=DW, CHANNELS_LAST=CHANNELS_LAST, INDEX_64=INDEX_64, BLOCK=BLOCK,
                     UNROLL=UNROLL, num_warps=NUM_WARPS)
    return y, indices
