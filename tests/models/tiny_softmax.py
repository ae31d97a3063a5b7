"""A small softmax-heavy model for tests: fast on a CPU and under Triton's interpreter."""

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, dim: int = 48):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.proj(x) @ x.transpose(-2, -1)
        return torch.softmax(scores, dim=-1) @ x


def get_inputs():
    return [torch.randn(2, 40, 48)]


def get_init_inputs():
    return [48]
