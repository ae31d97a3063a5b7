"""What the families share: task checks, C and CUDA element types, shape arithmetic."""

from __future__ import annotations

import math
from typing import Any

SUPPORTED_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}  # bytes per element of the dtypes above


def is_tensor(value: Any) -> bool:
    """A tensor argument in a task's JSON form."""
    return isinstance(value, dict) and "shape" in value


def split_kwargs(args: list[Any]) -> tuple[list[Any], dict[str, Any]]:
    """A task's arguments as capture records them: keyword ones in a last {"kwargs": {...}}
    element (capture/profile.py)."""
    if args and isinstance(args[-1], dict) and set(args[-1]) == {"kwargs"}:
        return list(args[:-1]), dict(args[-1]["kwargs"])
    return list(args), {}


def c_element(dtype: str) -> dict[str, Any]:
    """A C kernel file's element-type constants: ELEM_T, its kf_tensor code, and whether it is
    bfloat16 held as uint16_t (converted by hand). The type is named only in the constants
    block, since the scan reads a half type anywhere in a float32 op's text as lower precision."""
    ctype, code = C_TYPES[dtype]
    return {"ELEM_T": ctype, "ELEM_CODE": code, "BF16_BITS": dtype == "bfloat16"}


CUDA_TYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}


def cuda_element(dtype: str) -> dict[str, Any]:
    """A CUDA kernel file's element-type constants (ELEM_T converts to and from float)."""
    return {"ELEM_T": CUDA_TYPES[dtype], "ELEM_CODE": C_TYPES[dtype][1]}


C_TYPES = {"float32": ("float", "KF_F32"), "float16": ("_Float16", "KF_F16"),
           "bfloat16": ("uint16_t", "KF_BF16")}

def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def contiguous_strides(shape: list[int]) -> list[int]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return list(reversed(strides))


# ---------------------------------------------------------------- the norms' task checks

def short_dtype(dtype: str) -> str:
    """'torch.bfloat16' -> 'bfloat16'."""
    return dtype.replace("torch.", "")


def norm_input(task: Any, label: str) -> dict[str, Any] | str:
    """A norm's input tensor (its first argument), or why the built-in kernels cannot take it."""
    import math

    x = task.args[0] if task.args else None
    if not is_tensor(x):
        return f"{label} without a tensor input"
    if x["dtype"] not in SUPPORTED_DTYPES:
        return f"{label} on {x['dtype']} has no built-in template"
    if math.prod(x["shape"]) == 0:
        return f"{label} on an empty tensor has no built-in template"
    return x


def aux_dtype_reason(name: str, desc: Any, x_dtype: str) -> str | None:
    """Why a norm's weight or statistics tensor cannot be taken, or None. They may be the input's
    dtype or float32 (mixed-precision models); the kernels know those two cases only."""
    import math

    if desc is None:
        return None
    if not is_tensor(desc):
        return f"{name} is not a tensor"
    if desc["dtype"] not in (x_dtype, "torch.float32"):
        return f"{name} of dtype {desc['dtype']} beside a {x_dtype} input has no built-in template"
    if desc["stride"] != contiguous_strides(desc["shape"]) and math.prod(desc["shape"]) > 1:
        return f"a non-contiguous {name} has no built-in template"
    return None


def output_descs(task: Any) -> list[dict[str, Any]]:
    """The task's outputs as the kernels allocate them: shape, stride, short dtype. A norm's
    statistics differ between devices (CPU layer norm keeps bf16 ones, CUDA's are float32)."""
    return [{"shape": list(o["shape"]), "stride": list(o["stride"]), "dtype": short_dtype(o["dtype"])}
            for o in task.outputs]


def is_row_major(shape: list[int], stride: list[int]) -> bool:
    """Whether a tensor is contiguous, judged on its dims larger than 1 (a size-1 dim's stride
    is never read, and capture records whatever a view left there)."""
    expected = contiguous_strides(shape)
    return all(n <= 1 or s == e for n, s, e in zip(shape, stride, expected))


def outer_r_inner(shape: list[int], dim: int) -> tuple[int, int, int]:
    """A row-major tensor seen as [outer, R, inner] around `dim` (normalised): the dims before
    it, its own size, the dims after it (inner = 1: rows of R; else columns, inner contiguous)."""
    return math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])
