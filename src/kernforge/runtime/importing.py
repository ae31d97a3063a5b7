"""Importing a Python file by path: the user's model file and a Triton candidate both need it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


class FileImportError(Exception):
    """The file is not importable, or running it raised; the message says which and why."""


def import_path(path: Path, prefix: str) -> ModuleType:
    """Import `path` as a fresh module named after it (under `prefix`), registered in sys.modules
    so that decorators that look their module up (dataclasses, triton.jit) work."""
    name = f"{prefix}_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise FileImportError(f"'{path}' is not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        text = str(e).strip().splitlines()
        raise FileImportError(f"importing '{path}' raised {type(e).__name__}: "
                              f"{text[0] if text else '(no message)'}") from e
    return module
