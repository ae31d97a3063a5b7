"""HONEST  py-strided-input
CLASS honest: a Triton kernel that reads and writes through the strides

Every address is computed from x.stride() and y.stride() (a (B, S, N) view, any strides),
never from "row * n_cols": it is right for the contiguous task input and for any
non-contiguous one (a transposed or sliced input, a layout-keeping copy with gaps). A
rebuilt evaluator that feeds strided or gapped input copies must accept it.

EXPECTED  ok
"""
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_strided(X, Y, S, N, sxb, sxs, sxn, syb, sys_, syn, BLOCK: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    b, i = r // S, r % S
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + b * sxb + i * sxs + cols * sxn, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(Y + b * syb + i * sys_ + cols * syn, y.to(Y.dtype.element_ty), mask=mask)


def kf_forward(x, dim, half_to_float):
    x3 = x if x.dim() == 3 else x.view(1, -1, x.shape[-1]) if x.is_contiguous() else x.reshape(1, -1, x.shape[-1])
    y = torch.empty_like(x)  # same layout as x for a dense x (what the reference returns)
    y3 = y if y.dim() == 3 else y.view(1, -1, y.shape[-1])
    B, S, N = x3.shape
    softmax_strided[(B * S,)](x3, y3, S, N, *x3.stride(), *y3.stride(), BLOCK=triton.next_power_of_2(N))
    return y
