"""HONEST  py-exp2-subtract-first
CLASS honest: exp2 with log2(e), subtracting the maximum FIRST

The careful form of tests/redteam/cases/py-online-exp2-offset.py: exp2((x - max) * log2 e).
x - max is exact (Sterbenz) and small, so the scaling's rounding is relative to a small
number: right on inputs with a large common offset too. An evaluator that adds offset
inputs to catch the careless form must accept this one.

EXPECTED  ok
"""
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_exp2(X, Y, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp2((x - tl.max(x, axis=0)) * 1.4426950408889634)
    tl.store(Y + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


def kf_forward(x, dim, half_to_float):
    n_cols = x.shape[-1]
    y = torch.empty_like(x)
    softmax_exp2[(x.numel() // n_cols,)](x, y, n_cols, BLOCK_N=triton.next_power_of_2(n_cols))
    return y
