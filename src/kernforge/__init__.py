"""kernforge: find the hot operators of an unmodified PyTorch model and search for faster kernels."""

__version__ = "0.1.0"
