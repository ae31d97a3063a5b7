"""kernforge builtin: softmax over the last dim, each row split across programs.

kf-op: aten::_softmax.default

For few long rows, too few to fill the GPU one per program: program (row, chunk) finds
its chunk's max and sum of exp(x - max); a second kernel combines a row's partials (a few
KB, cached) in every program and writes its chunk.
"""
import torch
import triton
import triton.language as tl

# kf-constants: begin
BLOCK_N = 4096
NUM_WARPS = 8
LOG = False
# kf-constants: end


@triton.jit
def softmax_partials(X, M, S, n_cols, n_chunks, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(X + row * n_cols + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    s = tl.sum(tl.where(x == -float("inf"), 0.0, tl.exp(x - m)), axis=0)
    tl.store(M + row * n_chunks + chunk, m)
    tl.store(S + row * n_chunks + chunk, s)


@triton.jit
def softmax_finish(X, Y, M, S, n_cols, n_chunks, BLOCK_N: tl.constexpr, CHUNKS: tl.constexpr,
                   LOG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    k = tl.arange(0, CHUNKS)
    m_k = tl.load(M + row * n_chunks + k, mask=k < n_chunks, other=-float("inf"))
    s_k = tl.load(S + row * n_chunks + k, mask=k < n_chunks, other=0.0)
    m = tl.max(m_k, axis=0)
    s = tl.sum(tl.where(m_k == -float("inf"), 0.0, s_k * tl.exp(m_k - m)), axis=0)
    cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(X + row * n_cols + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
    if LOG:
        y = (x - m) - tl.log(s)
    else:
        y = tl.exp(x - m) / s
    tl.store(Y + row * n_cols + cols, y.to(Y.dtype.element_ty), mask=cols < n_cols)


def kf_forward(x, dim, half_to_float):
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    y = torch.empty_like(x)
    n_chunks = triton.cdiv(n_cols, BLOCK_N)
    partial_max = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x.device)
    partial_sum = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x.device)
    grid = (n_rows, n_chunks)
    softmax_partials[grid](x, partial_max, partial_sum, n_cols, n_chunks, BLOCK_N=BLOCK_N,
                           num_warps=NUM_WARPS)
    softmax_finish[grid](x, y, partial_max, partial_sum, n_cols, n_chunks, BLOCK_N=BLOCK_N,
                         CHUNKS=triton.next_power_of_2(n_chunks), LOG=LOG, num_warps=NUM_WARPS)
    return y
