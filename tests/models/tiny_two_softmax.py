"""Two attention-like softmaxes at different lengths: one op, one dtype, two signatures (siblings)."""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, dim: int = 32):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = torch.softmax(self.proj(x) @ x.transpose(-2, -1), dim=-1) @ x  # 2x40x40
        b = torch.softmax(self.proj(y) @ y.transpose(-2, -1), dim=-1) @ y  # 2x24x24
        return a.sum(dim=1) + b.sum(dim=1)


def get_inputs():
    return [torch.randn(2, 40, 32), torch.randn(2, 24, 32)]


def get_init_inputs():
    return [32]
