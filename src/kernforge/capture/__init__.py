"""capture: record every ATen call a model makes, with device time, ranked by cost."""

from kernforge.capture.profile import KINDS, Capture, OpProfile, capture_model, load_capture
from kernforge.capture.serialize import (
    Placeholder,
    decode_tree,
    decode_value,
    encode_value,
    load_sample,
    load_sample_outputs,
    placeholders_of,
)

__all__ = [
    "KINDS", "Capture", "OpProfile", "Placeholder", "capture_model", "decode_tree", "decode_value",
    "encode_value", "load_capture", "load_sample", "load_sample_outputs", "placeholders_of",
]
