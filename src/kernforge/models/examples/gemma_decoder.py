"""A Gemma-3-style decoder from transformers (configs/gemma3_text_*.json), random weights.

Hand-written RMSNorm (pow, mean, rsqrt, mul), rotary embeddings, grouped-query
attention with an explicit softmax over (B, heads, S, S), gated GELU MLP.
Full: 4 layers, hidden 1024, prefill of 2048 tokens; small: a CPU-sized copy.
"""

from kernforge.models.options import ModelOptions
from kernforge.models.zoo import hf_model


# On a GPU the dtype its users run (--dtype fp32 keeps float32); on a CPU float32.
GPU_DTYPE = "bf16"


READS = ("batch_size", "seq_len", "attention", "scale")  # the model options build() reads (dtype: every spec)


def build(opts: ModelOptions):
    tokens = opts.tokens(2048 if opts.scale == "full" else 32)
    return hf_model(f"gemma3_text_{opts.scale}", ModelOptions(**{**opts.__dict__, "seq_len": tokens}))
