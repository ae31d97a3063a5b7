# What every group norm kernel shares: a channel's weight and bias as the scale and shift of the
# centred x.


@triton.jit
def affine(W, B, c, ok, mean, rstd, IN_CHANNEL: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # y = (x - mean) * scale + shift: w folded into the scale, b the shift. Centred first, not
    # x * scale + (b - mean * scale): that cancels two large terms when the mean is far from 0
    scale = rstd
    shift = 0.0
    if HAS_W:
        scale = rstd * tl.load(W + c, mask=ok if not IN_CHANNEL else None).to(tl.float32)
    if HAS_B:
        shift = tl.load(B + c, mask=ok if not IN_CHANNEL else None).to(tl.float32)
    return scale, shift
