"""The decoder of a Stable-Diffusion-3.5-style VAE from diffusers (configs/sd35_vae_*.json).

GroupNorm with 32 groups, SiLU and 3x3 convolutions from 16 latent channels up to
an RGB image 8x larger. Full: 128 x 128 latents (a 1024 x 1024 image); small: 8 x 8.
"""

from kernforge.models.options import ModelOptions
from kernforge.models.zoo import diffusers_model


# On a GPU the dtype its users run (--dtype fp32 keeps float32); on a CPU float32.
GPU_DTYPE = "bf16"


READS = ("batch_size", "resolution", "scale")  # the model options build() reads (dtype: every spec)


def build(opts: ModelOptions):
    side = opts.side(128 if opts.scale == "full" else 8)
    return diffusers_model(f"sd35_vae_{opts.scale}", ModelOptions(**{**opts.__dict__, "resolution": side}))
