"""ResNet-50 from torchvision, random weights; the seed workload for adaptive_avg_pool2d.

Its pooling sees (N, 2048, 7, 7) at 224 x 224 input; batch 8 by default, 32 on a GPU run;
--scale small: batch 1 at 64 x 64 (a (1, 2048, 2, 2) pooling input).
"""

from kernforge.models.options import ModelOptions
from kernforge.models.zoo import torchvision_model


READS = ("batch_size", "resolution", "scale")  # the model options build() reads (dtype: every spec)


def build(opts: ModelOptions):
    small = opts.scale == "small"
    return torchvision_model("resnet50", ModelOptions(**{**opts.__dict__, "batch_size": opts.batch(1 if small else 8),
                                                         "resolution": opts.side(64 if small else 224)}))
