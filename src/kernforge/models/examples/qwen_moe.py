"""A Qwen-3-MoE-style decoder from transformers (configs/qwen3_moe_*.json), random weights.

Each layer's mixture-of-experts block routes every token with a softmax over the
experts (128 in full, 32 small), keeps the top 8 (4), and runs the expert MLPs.
Full: 4 layers, hidden 1024, prefill of 2048 tokens; small: a CPU-sized copy.
"""

from kernforge.models.options import ModelOptions
from kernforge.models.zoo import hf_model


# On a GPU the dtype its users run (--dtype fp32 keeps float32); on a CPU float32.
GPU_DTYPE = "bf16"


READS = ("batch_size", "seq_len", "attention", "scale")  # the model options build() reads (dtype: every spec)


def build(opts: ModelOptions):
    tokens = opts.tokens(2048 if opts.scale == "full" else 32)
    return hf_model(f"qwen3_moe_{opts.scale}", ModelOptions(**{**opts.__dict__, "seq_len": tokens}))
