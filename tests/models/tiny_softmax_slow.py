"""tests/models/tiny_softmax.py with a slow forward, so that each phase of a run that runs the
model (load, capture, apply) lasts long enough to be interrupted on cue (test_interrupt.py).

Each forward sleeps KF_SLOW_FORWARD_S seconds (0.3 by default: about 3 s of capture, which runs
at least nine forwards), after touching the file KF_FORWARD_MARK names, if any: a test waits for
it to know that the model is running (the load phase has no event, being before the run folder).
"""

import os
import time
from pathlib import Path

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, dim: int = 48):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if os.environ.get("KF_FORWARD_MARK"):
            Path(os.environ["KF_FORWARD_MARK"]).touch()
        time.sleep(float(os.environ.get("KF_SLOW_FORWARD_S", "0.3")))
        scores = self.proj(x) @ x.transpose(-2, -1)
        return torch.softmax(scores, dim=-1) @ x


def get_inputs():
    return [torch.randn(2, 40, 48)]


def get_init_inputs():
    return [48]
