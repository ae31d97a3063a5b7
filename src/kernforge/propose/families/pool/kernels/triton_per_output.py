"""kernforge builtin: 2-D average pooling (avg_pool2d, adaptive_avg_pool2d), one output per lane.

kf-op: aten::avg_pool2d.default

y[n, c, oh, ow] = the sum of x[n, c, ih, iw] over the window of (oh, ow), over its divisor.
Outputs are numbered in the output's memory order, so stores are coalesced; in channels-last
neighbouring lanes also read neighbouring channels. Each lane walks its window's KH x KW
positions (the largest window, for adaptive pools), masked to the window it really has:
unrolled (UNROLL, every load issued up front) or as a loop (less code for large windows).
Memory-bound: x read once (overlapping windows hit in cache), y written once.
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
ADAPTIVE = False
COUNT_PAD = True
DIVISOR = 0
CHANNELS_LAST = False
OUT_SHAPE = [2, 3, 5, 6]
OUT_STRIDE = [90, 30, 6, 1]
INDEX_64 = False
BLOCK = 256
NUM_WARPS = 4
UNROLL = True
# kf-constants: end


@triton.jit
def window(o, SIZE: tl.constexpr, OUT: tl.constexpr, K: tl.constexpr, S: tl.constexpr, P: tl.constexpr,
           ADAPTIVE: tl.constexpr):
    """[lo, hi): the rows (or columns) read, clipped to the input; span: the window clipped to
    the padded input (count_include_pad's count)."""
    if ADAPTIVE:
        lo = (o * SIZE) // OUT
        hi = ((o + 1) * SIZE + OUT - 1) // OUT
        span = hi - lo
    else:
        lo = o * S - P
        hi = tl.minimum(lo + K, SIZE + P)
        span = hi - lo
        lo = tl.maximum(lo, 0)
        hi = tl.minimum(hi, SIZE)
    return lo, hi, span


@triton.jit
def pool2d(X, Y, N: tl.constexpr, C: tl.constexpr, H: tl.constexpr, W: tl.constexpr,
           OH: tl.constexpr, OW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
           SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
           ADAPTIVE: tl.constexpr, COUNT_PAD: tl.constexpr, DIVISOR: tl.constexpr,
           CHANNELS_LAST: tl.constexpr, INDEX_64: tl.constexpr, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
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
    h0, h1, span_h = window(oh, H, OH, KH, SH, PH, ADAPTIVE)
    w0, w1, span_w = window(ow, W, OW, KW, SW, PW, ADAPTIVE)
    acc = tl.zeros([BLOCK], tl.float32)
    if UNROLL:
        for dh in tl.static_range(KH):
            for dw in tl.static_range(KW):
                ih, iw = h0 + dh, w0 + dw
                m = ok & (ih < h1) & (iw < w1)
                acc += tl.load(X + base + (ih * W + iw) * pixel, mask=m, other=0.0).to(tl.float32)
    else:
        for dh in range(KH):
            for dw in range(KW):
                ih, iw = h0 + dh, w0 + dw
                m = ok & (ih < h1) & (iw < w1)
                acc += tl.load(X + base + (ih * W + iw) * pixel, mask=m, other=0.0).to(tl.float32)
    if DIVISOR != 0:
        y = acc / DIVISOR
    elif ADAPTIVE or COUNT_PAD:
        y = acc / (span_h * span_w).to(tl.float32)
    else:
        y = acc / ((h1 - h0) * (w1 - w0)).to(tl.float32)
    tl.store(Y + idx, y.to(Y.dtype.element_ty), mask=ok)


def kf_forward(x, *args):
    # The window's size, stride and padding are baked into the constants; y has eager's shape
    # and strides (dense in the input's order, so output k is y's k-th element in memory).
    y = torch.empty_strided(OUT_SHAPE, OUT_STRIDE, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(N * C * OH * OW, BLOCK),)
    pool2d[grid](x, y, N=N, C=C, H=H, W=W, OH=OH, OW=OW, KH=KH, KW=KW, SH=SH, SW=SW, PH=PH, PW=PW,
                 ADAPTIVE=ADAPTIVE, COUNT_PAD=COUNT_PAD, DIVISOR=DIVISOR, CHANNELS_LAST=CHANNELS_LAST,
                 INDEX_64=INDEX_64, BLOCK=BLOCK, UNROLL=UNROLL, num_warps=NUM_WARPS)
    return y
