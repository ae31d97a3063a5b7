"""The operators of ../shared/BENCHMARKS.md's table, one model each, for `kernforge optimize`.

    python -m kernforge optimize bench.seed_ops:softmax_bf16_1x8x2048x2048 --backend triton

Each factory returns (model, inputs) on the CPU; kernforge moves them to the device.
ROWS gives each case its label in the table and the bytes that must move (read + write),
from which the floor is computed with the copy bandwidth measured in the same run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Fn(nn.Module):
    def __init__(self, fn, *params: torch.Tensor):
        super().__init__()
        self.fn = fn
        self.params = nn.ParameterList([nn.Parameter(p, requires_grad=False) for p in params])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x, *self.params)


def _randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(dtype)


def _avgpool(batch: int):
    return Fn(lambda x: F.adaptive_avg_pool2d(x, 1)), [_randn(batch, 2048, 7, 7)]


def avgpool_f32_32x2048x7x7():
    return _avgpool(32)


def avgpool_f32_256x2048x7x7():
    return _avgpool(256)


def _group_norm(channels: int, size: int):
    weight, bias = _randn(channels, dtype=torch.bfloat16), _randn(channels, dtype=torch.bfloat16)
    model = Fn(lambda x, w, b: F.group_norm(x, 32, w, b, 1e-6), weight, bias)
    return model, [_randn(1, channels, size, size, dtype=torch.bfloat16)]


def group_norm_bf16_1x512x128x128():
    return _group_norm(512, 128)


def group_norm_bf16_1x256x512x512():
    return _group_norm(256, 512)


def _softmax(*shape: int, dtype: torch.dtype):
    return Fn(lambda x: torch.softmax(x, dim=-1)), [_randn(*shape, dtype=dtype)]


def softmax_f32_4096x256():
    return _softmax(4096, 256, dtype=torch.float32)


def softmax_bf16_1x8x2048x2048():
    return _softmax(1, 8, 2048, 2048, dtype=torch.bfloat16)


def softmax_f32_8x262144():
    return _softmax(8, 262144, dtype=torch.float32)


def rms_norm_bf16_8192x4096():
    weight = _randn(4096, dtype=torch.bfloat16)
    return Fn(lambda x, w: F.rms_norm(x, (4096,), w, 1e-6), weight), [_randn(8192, 4096, dtype=torch.bfloat16)]


def layer_norm_bf16_8192x4096():
    weight, bias = _randn(4096, dtype=torch.bfloat16), _randn(4096, dtype=torch.bfloat16)
    model = Fn(lambda x, w, b: F.layer_norm(x, (4096,), w, b, 1e-5), weight, bias)
    return model, [_randn(8192, 4096, dtype=torch.bfloat16)]


def _unary(fn, dtype: torch.dtype, *shape: int):
    return Fn(fn), [_randn(*shape, dtype=dtype)]


def softplus_bf16_8192x8192():
    return _unary(lambda x: F.softplus(x, beta=1.0, threshold=20.0), torch.bfloat16, 8192, 8192)


def mish_bf16_8192x8192():
    return _unary(F.mish, torch.bfloat16, 8192, 8192)


def hardtanh_bf16_8192x8192():
    return _unary(lambda x: F.hardtanh(x, -2.0, 2.0), torch.bfloat16, 8192, 8192)


def clamp_f32_8192x8192():
    return _unary(lambda x: torch.clamp(x, -0.5, 0.5), torch.float32, 8192, 8192)


def softshrink_f32_8192x8192():
    return _unary(lambda x: F.softshrink(x, 0.5), torch.float32, 8192, 8192)


# Reductions over each kind of dimension, the indexed ones, scans and norms with batch statistics
# (issue 19). Each model returns what the op returns, so capture sees the op itself.
def _reduce(fn, dtype: torch.dtype, *shape: int):
    return Fn(fn), [_randn(*shape, dtype=dtype)]


def sum_f32_8x4096x2047_dim1():
    return _reduce(lambda x: x.sum(1), torch.float32, 8, 4096, 2047)


def mean_f32_8x4096x2047_dim1():
    return _reduce(lambda x: x.mean(1), torch.float32, 8, 4096, 2047)


def sum_bf16_8192x8192_dim0():
    return _reduce(lambda x: x.sum(0), torch.bfloat16, 8192, 8192)


def sum_bf16_8192x8192_dim1():
    return _reduce(lambda x: x.sum(1), torch.bfloat16, 8192, 8192)


def sum_f32_64x512x1024_dims02():
    return _reduce(lambda x: x.sum((0, 2)), torch.float32, 64, 512, 1024)


def mean_bf16_32x512x56x56_dims23():
    return _reduce(lambda x: x.mean((2, 3)), torch.bfloat16, 32, 512, 56, 56)


def amax_f32_4096x8192_dim1():
    return _reduce(lambda x: x.amax(1), torch.float32, 4096, 8192)


def max_f32_4096x8192_dim1():
    return _reduce(lambda x: torch.max(x, 1), torch.float32, 4096, 8192)


def argmax_bf16_8192x32000_dim1():
    return _reduce(lambda x: x.argmax(-1), torch.bfloat16, 8192, 32000)


def argmin_f32_8192x4096_dim0():
    return _reduce(lambda x: x.argmin(0), torch.float32, 8192, 4096)


def cumsum_f32_1024x16384_dim1():
    return _reduce(lambda x: x.cumsum(1), torch.float32, 1024, 16384)


def cumsum_bf16_16384x1024_dim0():
    return _reduce(lambda x: x.cumsum(0), torch.bfloat16, 16384, 1024)


def instance_norm_f32_16x64x128x128():
    return Fn(lambda x: F.instance_norm(x, eps=1e-5)), [_randn(16, 64, 128, 128)]


def batch_norm_train_bf16_64x256x56x56():
    weight, bias = _randn(256, dtype=torch.bfloat16), _randn(256, dtype=torch.bfloat16)
    model = Fn(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), weight, bias)
    return model, [_randn(64, 256, 56, 56, dtype=torch.bfloat16)]


F32, BF16, I64 = 4, 2, 8
# factory -> (label as in BENCHMARKS.md, bytes read + written)
ROWS = {
    "avgpool_f32_32x2048x7x7": ("adaptive_avg_pool2d 1x1, (32,2048,7,7) f32",
                                32 * 2048 * (49 + 1) * F32),
    "avgpool_f32_256x2048x7x7": ("adaptive_avg_pool2d 1x1, (256,2048,7,7) f32",
                                 256 * 2048 * (49 + 1) * F32),
    "group_norm_bf16_1x512x128x128": ("group_norm 32 groups, (1,512,128,128) bf16",
                                      2 * 512 * 128 * 128 * BF16),
    "group_norm_bf16_1x256x512x512": ("group_norm 32 groups, (1,256,512,512) bf16",
                                      2 * 256 * 512 * 512 * BF16),
    "softmax_f32_4096x256": ("softmax last dim, (4096,256) f32", 2 * 4096 * 256 * F32),
    "softmax_bf16_1x8x2048x2048": ("softmax last dim, (1,8,2048,2048) bf16", 2 * 8 * 2048 * 2048 * BF16),
    "softmax_f32_8x262144": ("softmax last dim, (8,262144) f32", 2 * 8 * 262144 * F32),
    "rms_norm_bf16_8192x4096": ("rms_norm, (8192,4096) bf16", 2 * 8192 * 4096 * BF16),
    "layer_norm_bf16_8192x4096": ("layer_norm, (8192,4096) bf16", 2 * 8192 * 4096 * BF16),
    "softplus_bf16_8192x8192": ("softplus, (8192,8192) bf16", 2 * 8192 * 8192 * BF16),
    "mish_bf16_8192x8192": ("mish, (8192,8192) bf16", 2 * 8192 * 8192 * BF16),
    "hardtanh_bf16_8192x8192": ("hardtanh, (8192,8192) bf16", 2 * 8192 * 8192 * BF16),
    "clamp_f32_8192x8192": ("clamp (number bounds), (8192,8192) f32", 2 * 8192 * 8192 * F32),
    "softshrink_f32_8192x8192": ("softshrink, (8192,8192) f32", 2 * 8192 * 8192 * F32),
    "sum_f32_8x4096x2047_dim1": ("sum over the middle dim, (8,4096,2047) f32", 8 * 4097 * 2047 * F32),
    "mean_f32_8x4096x2047_dim1": ("mean over the middle dim, (8,4096,2047) f32", 8 * 4097 * 2047 * F32),
    "sum_bf16_8192x8192_dim0": ("sum over the first dim, (8192,8192) bf16", 8193 * 8192 * BF16),
    "sum_bf16_8192x8192_dim1": ("sum over the last dim, (8192,8192) bf16", 8192 * 8193 * BF16),
    "sum_f32_64x512x1024_dims02": ("sum over dims 0 and 2, (64,512,1024) f32", (64 * 1024 + 1) * 512 * F32),
    "mean_bf16_32x512x56x56_dims23": ("mean over H and W, (32,512,56,56) bf16", 32 * 512 * (56 * 56 + 1) * BF16),
    "amax_f32_4096x8192_dim1": ("amax over the last dim, (4096,8192) f32", 4096 * 8193 * F32),
    "max_f32_4096x8192_dim1": ("max with indices over the last dim, (4096,8192) f32",
                               4096 * 8192 * F32 + 4096 * (F32 + I64)),
    "argmax_bf16_8192x32000_dim1": ("argmax over the last dim, (8192,32000) bf16",
                                    8192 * 32000 * BF16 + 8192 * I64),
    "argmin_f32_8192x4096_dim0": ("argmin over the first dim, (8192,4096) f32", 8192 * 4096 * F32 + 4096 * I64),
    "cumsum_f32_1024x16384_dim1": ("cumsum over the last dim, (1024,16384) f32", 2 * 1024 * 16384 * F32),
    "cumsum_bf16_16384x1024_dim0": ("cumsum over the first dim, (16384,1024) bf16", 2 * 16384 * 1024 * BF16),
    "instance_norm_f32_16x64x128x128": ("instance_norm, (16,64,128,128) f32", 2 * 16 * 64 * 128 * 128 * F32),
    "batch_norm_train_bf16_64x256x56x56": ("batch_norm with batch statistics, (64,256,56,56) bf16",
                                           2 * 64 * 256 * 56 * 56 * BF16),
}
