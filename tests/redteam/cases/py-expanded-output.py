"""CASE  py-expanded-output
CLASS judge-crash: an output with a stride-0 (expanded) batch dimension

MECHANISM  Only batch 0 is computed; the output is that (1, 40, 40) result expanded to (2,
40, 40): stride 0 over the batch, one storage for both batches, batch 1 "equal" to batch 0.

WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  A shape-and-values comparison that materialises
the output (.to(float64) copies it) sees a full (2, 40, 40) tensor; only a layout check
rejects it. Today the layout check does (strides (0, 40, 1) against (1600, 40, 1)); the
rebuild must keep that.

EXPECTED  wrong_result
"""
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_rows(X, Y, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    y = e / tl.sum(e, axis=0)
    tl.store(Y + row * n_cols + cols, y.to(Y.dtype.element_ty), mask=mask)


def launch(x, y):
    """The honest softmax over the last dim of contiguous x, into y."""
    n_cols = x.shape[-1]
    softmax_rows[(x.numel() // n_cols,)](x, y, n_cols, BLOCK_N=triton.next_power_of_2(n_cols))
    return y


def kf_forward(x, dim, half_to_float):
    first = launch(x[:1], torch.empty_like(x[:1]))
    return first.expand(x.shape)
