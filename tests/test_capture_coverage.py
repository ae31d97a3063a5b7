"""How much of a real model's time its captured ops account for: measured on the clock, so in the
timing tier, alone on the machine (scripts/test.sh runs it after every other tier)."""

from __future__ import annotations

import pytest
import torch

from kernforge.capture import capture_model
from kernforge.models import ModelOptions, load_model

pytestmark = pytest.mark.timing


def test_resnet50_captured_time_covers_the_plain_forward():
    torch.manual_seed(0)
    loaded = load_model("example:resnet50", torch.device("cpu"), ModelOptions(batch_size=2))
    cap = capture_model(loaded, out_dir=None, repeats=2)
    print(f"\nResNet-50 batch 2 on CPU: captured op time is {cap.coverage:.3f} of the plain "
          f"forward ({cap.measured_total_us / 1e3:.1f} ms); recording overhead {cap.overhead:.2f}x")
    # on a CPU the measured total is the plain forward's wall time
    assert cap.measured_total_us == pytest.approx(cap.forward_ms * 1e3)
    # Quiet, a 2-core machine measures 0.91-0.97 at batch 8; the band is wide because the plain
    # forward and the recorded passes are timed at different moments. It still catches a kernel
    # counted twice (2x) or activations kept alive across passes (3x, seen once). Beside another
    # test on the same two cores it measured outside it, hence this tier.
    assert 0.6 <= cap.coverage <= 1.5
    assert cap.overhead > 0
