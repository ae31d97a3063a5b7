import torch
from torch import nn


class Model(nn.Module):
    """A ResNet bottleneck's tail: bn3, the residual, relu (eval mode)."""

    def __init__(self, channels: int = 256):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn(self.conv(x))
        out += x
        return self.relu(out)


def get_inputs():
    return [torch.randn(8, 256, 56, 56)]


def get_init_inputs():
    return []
