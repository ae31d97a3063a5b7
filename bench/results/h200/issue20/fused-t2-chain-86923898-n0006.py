"""kernforge builtin: a chain of ATen ops fused into one Triton kernel over rows.

kf-op: chain:_to_copy+pow+mean+add+rsqrt+mul+_to_copy+add+mul+_to_copy+mul

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
    # triton has no tl.tanh in 3.6: (1 - e^-2|x|) / (1 + e^-2|x|), never overflowing
    t = tl.exp(-2.0 * tl.abs(x))
    r = (1.0 - t) / (1.0 + t)
    return tl.where(x < 0.0, -r, r)


# kf-constants: begin
@triton.jit
def f0(a):
    return a * a

@triton.jit
def f1(a, b):
    return a + b

@triton.jit
def f2(a):
    return tl.rsqrt(a)

@triton.jit
def f3(a, b):
    return a * b

@triton.jit
def chain_rows(I0, I1, I2, O0, O1):
    r = tl.program_id(0) * 16 + tl.arange(0, 16)
    rm = r < 16384
    ri0 = (r % 2048) * 1024 + (r // 2048) * 128
    ri2 = (r % 2048) * 128
    ro0 = (r % 2048) * 1024 + (r // 2048) * 128
    ro1 = (r % 2048) * 1024 + (r // 2048) * 128
    c = tl.arange(0, 128)
    cm = c < 128
    m = rm[:, None] & cm[None, :]
    v0 = tl.load(I0 + ri0[:, None] + (c)[None, :], mask=m, other=0.0).to(tl.float32)
    v1 = f0(v0)
    v2 = tl.sum(tl.where(m, v1, 0.0), axis=1)[:, None] * 0.0078125
    v3 = 1e-06
    v4 = f1(v2, v3)
    v5 = f2(v4)
    v6 = f3(v0, v5)
    v7 = tl.load(I1 + c, mask=cm, other=0.0).to(tl.float32)[None, :]
    v8 = 1.0
    v9 = f1(v7, v8)
    v10 = f3(v6, v9)
    v11 = tl.load(I2 + ri2[:, None] + (c)[None, :], mask=m, other=0.0).to(tl.float32)
    v12 = f3(v10, v11)
    tl.store(O0 + ro0[:, None] + (c)[None, :], tl.broadcast_to(v10.to(O0.dtype.element_ty), [16, 128]), mask=m)
    tl.store(O1 + ro1[:, None] + (c)[None, :], tl.broadcast_to(v12.to(O1.dtype.element_ty), [16, 128]), mask=m)
INPUTS = (((1, 8, 2048, 128), (2097152, 128, 1024, 1), 'torch.bfloat16'), ((128,), (1,), 'torch.bfloat16'), ((1, 1, 2048, 128), (262144, 262144, 128, 1), 'torch.bfloat16'))
OUTPUTS = (((1, 8, 2048, 128), (2097152, 128, 1024, 1), torch.bfloat16), ((1, 8, 2048, 128), (2097152, 128, 1024, 1), torch.bfloat16))
ROWS = 16384
BLOCK_R = 16
GRID_COLS = 1
NUM_WARPS = 8
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
