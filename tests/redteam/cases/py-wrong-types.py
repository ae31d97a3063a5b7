"""CASE  py-wrong-types
CLASS judge-crash: a tuple of wrong types instead of a tensor

MECHANISM  Returns (list of floats, "probabilities", 1): the right values, as nested Python
lists, and no tensor at all.

WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  The outputs are flattened with pytree and
filtered to tensors; what is left is nothing, and a comparison that zips outputs with
oracles could pass vacuously. Today compare() counts them ("returned 0 outputs") - the
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
    y = launch(x, torch.empty_like(x))
    return (y.tolist(), "probabilities", 1)
