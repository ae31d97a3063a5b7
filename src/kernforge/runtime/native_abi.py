"""The calling convention of compiled kernels (cpu: gcc, cuda: nvcc), torch and ctypes only.

    int kf_forward(const kf_tensor *inputs, int n_inputs, kf_tensor *outputs, int n_outputs);

The evaluator (kernforge.backends.native) and an installed or exported kernel (router.py,
shipped with this file in every exported package) call a library through these few functions,
so both see the same structs.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import torch

MAX_DIMS = 8
DTYPE_CODES = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3,
               torch.int32: 4, torch.int64: 5, torch.bool: 6, torch.uint8: 6, torch.int8: 7}


class KfTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("ndim", ctypes.c_int64),
                ("sizes", ctypes.c_int64 * MAX_DIMS), ("strides", ctypes.c_int64 * MAX_DIMS),
                ("dtype", ctypes.c_int32)]


def bind_entry(library: Path) -> Any:
    """The library's kf_forward with its argument types; raises OSError or AttributeError."""
    entry = ctypes.CDLL(str(library)).kf_forward
    entry.restype = ctypes.c_int
    entry.argtypes = [ctypes.POINTER(KfTensor), ctypes.c_int, ctypes.POINTER(KfTensor), ctypes.c_int]
    return entry


def call_entry(entry: Any, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
    in_structs = (KfTensor * max(1, len(inputs)))(*[as_struct(t) for t in inputs])
    out_structs = (KfTensor * max(1, len(outputs)))(*[as_struct(t) for t in outputs])
    code = entry(in_structs, len(inputs), out_structs, len(outputs))
    if code != 0:
        raise RuntimeError(f"kf_forward returned error code {code}")


def as_struct(t: torch.Tensor) -> KfTensor:
    if t.dim() > MAX_DIMS:
        raise RuntimeError(f"compiled backends handle tensors of at most {MAX_DIMS} dimensions")
    if t.dtype not in DTYPE_CODES:
        raise RuntimeError(f"compiled backends have no C type for {t.dtype}")
    s = KfTensor()
    s.data = t.data_ptr()
    s.ndim = t.dim()
    for i, (size, stride) in enumerate(zip(t.shape, t.stride())):
        s.sizes[i], s.strides[i] = size, stride
    s.dtype = DTYPE_CODES[t.dtype]
    return s


def empty_like_meta(meta: dict[str, Any], device: str | torch.device) -> torch.Tensor:
    """An output as the reference lays it out, its contents whatever the allocator left (the
    evaluator prefills it; an exported package ships this file, torch-only)."""
    dtype = getattr(torch, meta["dtype"].replace("torch.", ""))
    return torch.empty_strided(meta["shape"], meta["stride"], dtype=dtype, device=device)
