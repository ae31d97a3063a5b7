"""ResNet-50 from torchvision, random weights; the seed workload for adaptive_avg_pool2d.

Its pooling sees (N, 2048, 7, 7) at 224 x 224 input; batch 8 by default, 32 on a GPU run.
"""

from kernforge.models.options import ModelOptions
from kernforge.models.zoo import torchvision_model


def build(opts: ModelOptions):
    return torchvision_model("resnet50", ModelOptions(**{**opts.__dict__,
                                                         "batch_size": opts.batch(8)}))
