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


F32, BF16 = 4, 2
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
}
