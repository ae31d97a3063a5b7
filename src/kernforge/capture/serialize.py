"""Saving real inputs so that they load back exactly: values, dtype, strides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_map

# torch.dtype, torch.layout and torch.memory_format do not survive torch.save;
# they are stored by name and turned back into the torch objects on load.
_TORCH_ATTR_TYPES = (torch.dtype, torch.layout, torch.memory_format)


def encode_value(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, _TORCH_ATTR_TYPES):
        return {"__torch_attr__": str(x).replace("torch.", "")}
    if isinstance(x, torch.device):
        return {"__torch_device__": str(x)}
    return x


def decode_value(x: Any) -> Any:
    if isinstance(x, dict) and "__torch_attr__" in x:
        return getattr(torch, x["__torch_attr__"])
    if isinstance(x, dict) and "__torch_device__" in x:
        return torch.device(x["__torch_device__"])
    return x


def decode_tree(value: Any) -> Any:
    """decode_value over a nested structure; the encoded dicts are leaves, not containers."""
    return tree_map(decode_value, value, is_leaf=_is_encoded)


def _is_encoded(x: Any) -> bool:
    return isinstance(x, dict) and ("__torch_attr__" in x or "__torch_device__" in x)


def extent(t: torch.Tensor) -> int:
    """Elements of storage the tensor spans from its offset: what a layout-keeping copy holds."""
    if t.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))


def flat_span(t: torch.Tensor) -> torch.Tensor:
    """The storage the tensor spans, as one contiguous 1-D view (its gaps and overlaps included)."""
    return torch.as_strided(t, (extent(t),), (1,), t.storage_offset())


def layout_copy(t: torch.Tensor, device: torch.device | str | None = None) -> torch.Tensor:
    """A detached copy with the same shape and strides, on `device`: gaps between rows and stride-0
    (broadcast) dimensions kept. clone() makes a non-dense view contiguous, and copy_() into
    empty_strided refuses a stride-0 destination (an expanded model input ended in a traceback)."""
    device = t.device if device is None else device
    span = torch.empty(extent(t), dtype=t.dtype, device=device)
    span.copy_(flat_span(t.detach()))
    return torch.as_strided(span, t.shape, t.stride(), 0)


def strided_copy(x: Any) -> Any:
    """layout_copy of a tensor; anything else as it is."""
    return layout_copy(x) if isinstance(x, torch.Tensor) else x


def save_sample(args: Any, kwargs: Any, outputs: list[torch.Tensor], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    args, kwargs, outputs = tree_map(encode_value, (list(args), kwargs, list(outputs)))
    torch.save({"args": args, "kwargs": kwargs, "outputs": outputs}, path)


def load_sample(path: Path) -> tuple[list[Any], dict[str, Any]]:
    """Load a saved (args, kwargs) exactly: dtype, strides and values as captured."""
    blob = torch.load(path, weights_only=False, map_location="cpu")
    return decode_tree(blob["args"]), decode_tree(blob["kwargs"])


def load_sample_outputs(path: Path) -> list[torch.Tensor]:
    """The outputs the op gave on that sample in the model, as the model ran it."""
    return torch.load(path, weights_only=False, map_location="cpu").get("outputs", [])
