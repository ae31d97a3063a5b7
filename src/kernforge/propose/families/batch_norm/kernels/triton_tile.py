"""kernforge builtin: batch norm in inference, [positions x channels] tiles.

kf-op: aten::native_batch_norm.default

y = x * scale[c] + shift[c], scale = w / sqrt(running_var + eps), shift = b - running_mean * scale.
Channels-last (NHWC) input: the channel is the fastest index, so a program takes a tile of
BLOCK_P positions by BLOCK_C channels (BLOCK_C the channels rounded up to a power of two, at most
BLOCK) and loads scale and shift once per tile as vectors. ResNet-50's C of 64..2048 fills it.
"""
import torch
import triton
import triton.language as tl

# kf-constants: begin
N = 2
C = 3
HW = 35
EPS = 1e-05
HAS_W = True
HAS_B = True
SAVED = 0
SAVED_FP32 = False
RESERVE = False
BLOCK = 1024
NUM_WARPS = 4
# kf-constants: end


@triton.jit
def scale_shift(W, B, RM, RV, c, eps, mask, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # y = x * scale + shift with scale = w / sqrt(var + eps), shift = b - mean * scale
    scale = tl.rsqrt(tl.load(RV + c, mask=mask, other=1.0).to(tl.float32) + eps)
    if HAS_W:
        scale = scale * tl.load(W + c, mask=mask, other=0.0).to(tl.float32)
    shift = -tl.load(RM + c, mask=mask, other=0.0).to(tl.float32) * scale
    if HAS_B:
        shift = shift + tl.load(B + c, mask=mask, other=0.0).to(tl.float32)
    return scale, shift


@triton.jit
def store_saved(RM, RV, SM, SI, c, eps, mask, HAS_SAVED: tl.constexpr):
    # CUDA's eval-mode saved statistics: running_mean and 1/sqrt(running_var + eps), per channel
    if HAS_SAVED:
        tl.store(SM + c, tl.load(RM + c, mask=mask).to(SM.dtype.element_ty), mask=mask)
        inv = tl.rsqrt(tl.load(RV + c, mask=mask, other=1.0).to(tl.float32) + eps)
        tl.store(SI + c, inv.to(SI.dtype.element_ty), mask=mask)


@triton.jit
def bn_tile(X, W, B, RM, RV, Y, SM, SI, positions, C, eps, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr,
            HAS_W: tl.constexpr, HAS_B: tl.constexpr, HAS_SAVED: tl.constexpr):
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = c < C
    scale, shift = scale_shift(W, B, RM, RV, c, eps, c_ok, HAS_W, HAS_B)
    ok = (p < positions)[:, None] & c_ok[None, :]
    offs = p[:, None].to(tl.int64) * C + c[None, :]
    x = tl.load(X + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(Y + offs, (x * scale[None, :] + shift[None, :]).to(Y.dtype.element_ty), mask=ok)
    store_saved(RM, RV, SM, SI, c, eps, c_ok & (tl.program_id(0) == 0), HAS_SAVED)


def kf_forward(input, weight, bias, running_mean, running_var, *flags):
    x = input
    # y keeps x's layout; the saved statistics are [C] or empty, as the task lists them
    y = torch.empty_like(x)
    saved_dtype = torch.float32 if SAVED_FP32 else x.dtype
    save_mean = torch.empty(SAVED, dtype=saved_dtype, device=x.device)
    save_invstd = torch.empty(SAVED, dtype=saved_dtype, device=x.device)
    block_c = min(triton.next_power_of_2(C), BLOCK)
    block_p = BLOCK // block_c
    grid = (triton.cdiv(N * HW, block_p), triton.cdiv(C, block_c))
    bn_tile[grid](x, weight if HAS_W else x, bias if HAS_B else x, running_mean, running_var, y,
                  save_mean if SAVED else x, save_invstd if SAVED else x, N * HW, C, EPS, BLOCK_P=block_p,
                  BLOCK_C=block_c, HAS_W=HAS_W, HAS_B=HAS_B, HAS_SAVED=SAVED > 0, num_warps=NUM_WARPS)
    if RESERVE:  # cudnn_batch_norm's fourth output: its reserve space, empty in inference
        return y, save_mean, save_invstd, torch.empty(0, dtype=torch.uint8, device=x.device)
    return y, save_mean, save_invstd
