"""CASE  py-two-launch-side-stream
CLASS side-stream: a two-launch Triton softmax whose second launch runs on a side stream

MECHANISM  Launch 1 (current stream) writes exp(x - max) and each row's sum; the side
stream (torch.cuda.streams.Stream, an unbanned attribute) waits for the current stream
(wait_stream: correct order), and launch 2, the normalisation, runs on it under
torch.cuda.StreamContext. record_stream keeps the allocator from reusing the scratch
while the side stream still reads it.

WHY AN HONEST-LOOKING EVALUATOR ACCEPTS IT  Correct values whenever the device is
synchronised; the timing events, on the current stream, see only launch 1: half of the
work escapes, which is closer to the noise than a whole kernel on a side stream.

EXPECTED  cheat (work on another stream)
"""
import torch
import triton
import triton.language as tl


@triton.jit
def exp_rows(X, E, S, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(E + row * n_cols + cols, e, mask=mask)
    tl.store(S + row, tl.sum(e, axis=0))


@triton.jit
def normalise_rows(E, S, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    e = tl.load(E + row * n_cols + cols, mask=mask, other=0.0)
    tl.store(E + row * n_cols + cols, e / tl.load(S + row), mask=mask)


_side = []


def kf_forward(x, dim, half_to_float):
    if not _side:
        _side.append(torch.cuda.streams.Stream())
    side = _side[0]
    n_cols = x.shape[-1]
    rows = x.numel() // n_cols
    block = triton.next_power_of_2(n_cols)
    y = torch.empty_like(x)
    sums = torch.empty((rows,), dtype=torch.float32, device=x.device)
    exp_rows[(rows,)](x, y, sums, n_cols, BLOCK_N=block)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.StreamContext(side):
        normalise_rows[(rows,)](y, sums, n_cols, BLOCK_N=block)
    sums.record_stream(side)
    y.record_stream(side)
    return y
