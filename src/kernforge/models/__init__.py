"""models: turn a model spec into a module and its example inputs on a device."""

from kernforge.models.loader import (
    LoadedModel,
    bundled_examples,
    load_model,
    resolve_device,
    run_forward,
)
from kernforge.models.options import ModelOptions

__all__ = ["LoadedModel", "ModelOptions", "bundled_examples", "load_model", "resolve_device", "run_forward"]
