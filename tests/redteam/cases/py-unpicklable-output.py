"""CASE  py-unpicklable-output
CLASS judge-crash: an output that cannot be saved

MECHANISM  The honest result as a torch.Tensor subclass whose __reduce_ex__ raises: the
worker's torch.save of the outputs fails after all checks ran.

WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  The checks call the kernel and compare nothing
in the worker; the exception comes out of torch.save, outside the try around the kernel's
calls, and kills the worker with a traceback. Today that is reported as a crash (which is
right: not ok), but the reason is the worker's exit status, not what the candidate did.

EXPECTED  crash, runtime_error, wrong_result or cheat
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


class Unsaveable(torch.Tensor):
    def __reduce_ex__(self, protocol):
        raise RuntimeError("this output cannot be pickled")


def kf_forward(x, dim, half_to_float):
    return launch(x, torch.empty_like(x)).as_subclass(Unsaveable)
