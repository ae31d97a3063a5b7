"""Softmax-heavy self-attention block, KernelBench form.

Attention scores of shape (batch, heads, seq, seq) go through a softmax over the
last dimension; at seq 512 that softmax moves 2 x 33.5 MB in fp32, a large share
of the block's time next to the two batched matmuls.
"""

import torch
from torch import nn

BATCH, SEQ, DIM, HEADS = 4, 512, 256, 8
SMALL = {"batch": 1, "seq": 64, "dim": 64, "heads": 4}  # --scale small: a CPU's minute


READS = ("batch_size", "seq_len", "scale")  # the model options build() reads (dtype: every spec)


class Model(nn.Module):
    def __init__(self, dim: int = DIM, heads: int = HEADS):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        probs = torch.softmax(scores, dim=-1)
        ctx = (probs @ v).transpose(1, 2).reshape(b, s, d)
        return self.out(ctx)


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, HEADS]


def build(opts):
    """As kernforge loads the example: --scale, --batch-size and --seq-len honoured (the file is
    also a KernelBench-form model, read through get_inputs() when given as a path)."""
    small = opts.scale == "small"
    dim, heads = (SMALL["dim"], SMALL["heads"]) if small else (DIM, HEADS)
    batch = opts.batch(SMALL["batch"] if small else BATCH)
    seq = opts.tokens(SMALL["seq"] if small else SEQ)
    return Model(dim, heads), (torch.randn(batch, seq, dim),)
