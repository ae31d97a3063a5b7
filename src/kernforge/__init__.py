"""kernforge: find the hot operators of an unmodified PyTorch model and search for faster kernels."""

from typing import Any

__version__ = "0.1.0"

__all__ = ["patch", "unpatch"]


def __getattr__(name: str) -> Any:
    # kernforge.patch / kernforge.unpatch without importing torch for `kernforge --help`
    if name in ("patch", "unpatch"):
        from kernforge import integrate

        return getattr(integrate, name)
    raise AttributeError(f"module 'kernforge' has no attribute {name!r}")
