"""CASE  py-tensor-subclass
CLASS judge-crash: returns a torch.Tensor subclass defined in the candidate

MECHANISM  The honest result viewed as a subclass of torch.Tensor defined in the candidate
module (`class Probabilities(torch.Tensor): pass`). detach/cpu/clone keep the subclass, so
the worker's outputs file pickles a reference to kf_candidate_<hash>.Probabilities.

WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  Nothing in the worker looks at the type:
isinstance(out, torch.Tensor) holds. The search process then unpickles the outputs with
torch.load(weights_only=False) and needs the class's module, which exists only in the
worker: ModuleNotFoundError is raised out of judge() and evaluate_candidate, i.e. out of the
search itself.

EXPECTED  cheat or wrong_result (a verdict, never an exception in the search process)
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


class Probabilities(torch.Tensor):
    pass


def kf_forward(x, dim, half_to_float):
    return launch(x, torch.empty_like(x)).as_subclass(Probabilities)
