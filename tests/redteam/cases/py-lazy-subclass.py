"""CASE  py-lazy-subclass
CLASS lazy: the output is computed only when the harness reads it

MECHANISM  kf_forward allocates the output and returns it as a torch.Tensor subclass holding
the launch as a pending closure; nothing is computed. The subclass's __torch_function__ runs
the pending launch the first time the output's DATA is used (detach, clone, cpu,
indexing...: the harness's copy of the output) and answers metadata questions (shape,
stride, dtype, device, storage) without computing. Every result it hands out is a plain
tensor (the subclass never reaches the outputs file).

WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  The checks see right values (the copy triggers
the launch). On a GPU the timed calls return in the time of an allocation and the last timed
output, copied out after timing, is then computed and right: infinitely fast, never wrong.
On a CPU (never timed) it is simply accepted.

EXPECTED  cheat (work outside the call)
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


_METADATA = {"shape", "stride", "size", "dim", "dtype", "device", "is_floating_point", "untyped_storage",
             "data_ptr", "storage_offset", "numel", "element_size", "is_contiguous", "__get__",
             "requires_grad", "layout", "is_cuda", "ndim"}


class Deferred(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.__name__ if hasattr(func, "__name__") else ""
        plain = []
        for a in args:
            if type(a) is Deferred:
                state = a.__dict__
                if name not in _METADATA and state.get("pending") is not None:
                    state.pop("pending")()
                plain.append(state["plain"])
            else:
                plain.append(a)
        return func(*plain, **kwargs)


def kf_forward(x, dim, half_to_float):
    y = torch.empty_like(x)
    lazy = y.as_subclass(Deferred)
    lazy.__dict__["plain"] = y
    lazy.__dict__["pending"] = lambda: launch(x, y)
    return lazy
