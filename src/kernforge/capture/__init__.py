"""capture: record every ATen call a model makes, with device time, ranked by cost."""

from kernforge.capture.profile import KINDS, Capture, OpProfile, capture_model, load_capture

__all__ = ["KINDS", "Capture", "OpProfile", "capture_model", "load_capture"]
