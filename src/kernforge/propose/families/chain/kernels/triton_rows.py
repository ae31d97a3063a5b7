"""kernforge builtin: a chain of ATen ops fused into one Triton kernel over rows.

kf-op: chain:mul+add+_softmax

Every tensor of the chain broadcasts to one domain [..., N], seen as [rows, N]; reductions run
over N. `chain_rows`, in the constants block, is generated from the chain: each input loaded
once per pass at its own strides (a tensor broadcast along N as one value a row, one the same
for every row as one row), each step an fp32 function f<i>, reductions with tl.sum / tl.max,
each output rounded once and stored at the model's strides. A tile holds whole rows
(BLOCK_N >= N; with no reduction the grid splits N too); a looped kernel makes one pass over
the row per reduction level and a last pass that stores. Intermediates never touch memory.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def kf_tanh(x):
    # triton has no tl.tanh in 3.6. Cephes' tanhf: an odd polynomial below |x| = 0.625, where
    # 1 - e^-2|x| would cancel (3% off at 1e-2); above, 1 - 2t/(1+t) with t = e^-2|x| (no overflow)
    a = tl.abs(x)
    z = a * a
    p = ((((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z
          + 1.33314422036e-1) * z - 3.33332819422e-1) * z * a + a
    t = tl.exp(-2.0 * a)
    r = tl.where(a < 0.625, p, 1.0 - 2.0 * t / (1.0 + t))
    return tl.where(x < 0.0, -r, r)


# kf-constants: begin
@triton.jit
def f0(a, b):
    return a * b

@triton.jit
def f1(a, b):
    return a + b

@triton.jit
def f2(a, b):
    return a - b

@triton.jit
def f3(a):
    return tl.exp(a)

@triton.jit
def f4(a, b):
    return a / b

@triton.jit
def chain_rows(I0, I1, O0):
    r = tl.program_id(0) * 1 + tl.arange(0, 1)
    rm = r < 128
    ri0 = (r) * 32
    ri1 = (r % 32) * 32
    ro0 = (r) * 32
    c = tl.arange(0, 32)
    cm = c < 32
    m = rm[:, None] & cm[None, :]
    v0 = tl.load(I0 + ri0[:, None] + (c)[None, :], mask=m, other=0.0).to(tl.float32)
    v1 = 0.0625
    v2 = f0(v0, v1)
    v3 = tl.load(I1 + ri1[:, None] + (c)[None, :], mask=m, other=0.0).to(tl.float32)
    v4 = f1(v2, v3)
    v5 = tl.max(tl.where(m, v4, float("-inf")), axis=1)[:, None]
    v6 = f2(v4, v5)
    v7 = f3(v6)
    v8 = tl.sum(tl.where(m, v7, 0.0), axis=1)[:, None]
    v9 = f4(v7, v8)
    tl.store(O0 + ro0[:, None] + (c)[None, :], tl.broadcast_to(v9.to(O0.dtype.element_ty), [1, 32]), mask=m)
INPUTS = (((1, 4, 32, 32), (4096, 1024, 32, 1), 'torch.float32'), ((1, 1, 32, 32), (1024, 1024, 32, 1), 'torch.float32'))
OUTPUTS = (((1, 4, 32, 32), (4096, 1024, 32, 1), torch.float32),)
ROWS = 128
BLOCK_R = 1
GRID_COLS = 1
NUM_WARPS = 1
# kf-constants: end


def kf_forward(*inputs):
    # the chain's inputs in order; returns the tuple of the values it keeps
    if len(inputs) != len(INPUTS):
        raise ValueError(f"the chain takes {len(INPUTS)} inputs, got {len(inputs)}")
    for k in range(len(INPUTS)):
        # shapes and strides are baked into the kernel: another layout would be read wrongly
        if tuple(inputs[k].shape) != INPUTS[k][0] or inputs[k].stride() != INPUTS[k][1]:
            raise ValueError(f"input {k} was built for shape {INPUTS[k][0]} and strides {INPUTS[k][1]}")
    outs = tuple(torch.empty_strided(shape, stride, dtype=dtype, device=inputs[0].device)
                 for shape, stride, dtype in OUTPUTS)
    grid = (triton.cdiv(ROWS, BLOCK_R), GRID_COLS)
    chain_rows[grid](*inputs, *outs, num_warps=NUM_WARPS)
    return outs
