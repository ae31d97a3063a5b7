"""What a user can say about the model's size and precision, whatever its spec."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernforge.errors import UserError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SCALES = ("small", "full")
ATTENTIONS = ("eager", "sdpa")


@dataclass(frozen=True)
class ModelOptions:
    batch_size: int | None = None  # None: the spec's own default
    seq_len: int | None = None  # language models: tokens per sequence
    resolution: int | None = None  # vision: image side; VAE decoders: latent side
    dtype: str | None = None  # fp32 | bf16 | fp16; None keeps the model's own
    scale: str = "full"  # bundled examples: "full" layer shapes, or "small" for a CPU
    # transformers models: eager attention shows its softmax and masking as ops kernforge can
    # replace; sdpa is what a user gets by default (one fused call, no softmax op)
    attention: str = "eager"

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in DTYPES:
            raise UserError(f"unknown dtype '{self.dtype}'; choose one of: {', '.join(DTYPES)}")
        if self.attention not in ATTENTIONS:
            raise UserError(f"unknown attention '{self.attention}'; choose one of: {', '.join(ATTENTIONS)}")
        if self.scale not in SCALES:
            raise UserError(f"unknown scale '{self.scale}'; choose one of: {', '.join(SCALES)}")
        for name in ("batch_size", "seq_len", "resolution"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {value}")

    @property
    def torch_dtype(self) -> torch.dtype | None:
        return DTYPES[self.dtype] if self.dtype else None

    def batch(self, default: int) -> int:
        return self.batch_size or default

    def tokens(self, default: int) -> int:
        return self.seq_len or default

    def side(self, default: int) -> int:
        return self.resolution or default
