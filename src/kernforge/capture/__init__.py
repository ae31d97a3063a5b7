"""capture: record every ATen call a model makes, with device time, ranked by cost."""

from kernforge.capture.recorder import (
    Capture,
    OpProfile,
    capture_model,
    decode_tree,
    decode_value,
    encode_value,
    load_capture,
    load_sample,
)

__all__ = [
    "Capture", "OpProfile", "capture_model", "decode_tree", "decode_value", "encode_value", "load_capture",
    "load_sample",
]
