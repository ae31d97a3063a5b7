"""CASE  py-torch-multiprocessing
CLASS async: work left to another process (torch.multiprocessing)

MECHANISM  `import torch.multiprocessing as tmp` (an import of a torch submodule: only
torch.nn and torch.ops are flagged, and calls on the alias `tmp` are not calls on `torch`).
The output is put in shared memory (share_memory_, no compute method) and a forked child
process runs the launch into it. Checked calls join the child; timed calls (input address
seen twice before) do not.

WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  The banned-import rule looks at the first name
of the module ("torch"); the library-op rule at calls on names bound to the torch module
itself. The child's writes land in the shared output; on a CPU every call joins it and the
result is right. (On a GPU a forked child cannot use CUDA: there it fails as a wrong result,
which is also a rejection.)

EXPECTED  cheat (another process); wrong_result on a GPU
"""
import torch.multiprocessing as tmp

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


_fork = tmp.get_context("fork")
_running = []
_seen = {}


def kf_forward(x, dim, half_to_float):
    while _running:
        _running.pop().join()
    address = x.data_ptr()
    _seen[address] = _seen.get(address, 0) + 1
    y = torch.empty_like(x).share_memory_()
    child = _fork.Process(target=launch, args=(x, y))
    child.start()
    if _seen[address] <= 2:  # a checked call: wait for it
        child.join()
    else:
        _running.append(child)
    return y
