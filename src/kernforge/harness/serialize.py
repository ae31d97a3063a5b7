"""Saving real inputs so that they load back exactly: values, dtype, strides.

A tensor too large for the capture's sample caps is saved as a Placeholder: its
layout and dtype, no values. A sample holding one is partly real; the evaluator
draws the placeholder's values (evaluate.inputs.drawn_set).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

# torch.dtype, torch.layout and torch.memory_format do not survive torch.save;
# they are stored by name and turned back into the torch objects on load.
_TORCH_ATTR_TYPES = (torch.dtype, torch.layout, torch.memory_format)


@dataclass(frozen=True)
class Placeholder:
    """An input tensor over the sample caps: what it looked like, without its values. low and high
    are the captured values' range for an integer or bool tensor (two numbers, read at capture),
    which a draw must stay within: an index drawn outside its dimension makes eager raise (a
    device-side assert on a GPU). storage_offset is the model's; a draw, like a saved real tensor
    (layout_copy), keeps it modulo ALIGN_BYTES (its alignment), not its distance from the start."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str  # "torch.float32", as tensor descriptions write it
    storage_offset: int = 0
    low: int | None = None
    high: int | None = None

    @classmethod
    def of(cls, t: torch.Tensor) -> Placeholder:
        low = high = None
        if not (t.is_floating_point() or t.is_complex()) and t.numel():
            low, high = int(t.min()), int(t.max())
        return cls(shape=tuple(t.shape), stride=tuple(t.stride()), dtype=str(t.dtype),
                   storage_offset=t.storage_offset(), low=low, high=high)

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype.replace("torch.", ""))

    @property
    def extent(self) -> int:
        return layout_extent(self.shape, self.stride)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "shape": list(self.shape), "stride": list(self.stride)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Placeholder:
        return cls(**{**data, "shape": tuple(data["shape"]), "stride": tuple(data["stride"])})


def placeholders_of(value: Any) -> list[Placeholder]:
    """The placeholders in a sample's (args, kwargs), in argument order."""
    return [x for x in tree_flatten(value)[0] if isinstance(x, Placeholder)]


def encode_value(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, Placeholder):
        return {"__placeholder__": x.to_json()}
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
    if isinstance(x, dict) and "__placeholder__" in x:
        return Placeholder.from_json(x["__placeholder__"])
    return x


def decode_tree(value: Any) -> Any:
    """decode_value over a nested structure; the encoded dicts are leaves, not containers."""
    return tree_map(decode_value, value, is_leaf=_is_encoded)


def _is_encoded(x: Any) -> bool:
    return isinstance(x, dict) and ("__torch_attr__" in x or "__torch_device__" in x or "__placeholder__" in x)


def extent(t: torch.Tensor) -> int:
    """Elements of storage the tensor spans from its offset: what a layout-keeping copy holds."""
    return layout_extent(t.shape, t.stride())


def layout_extent(shape: Any, stride: Any) -> int:
    if any(size == 0 for size in shape):
        return 0
    return 1 + sum((size - 1) * step for size, step in zip(shape, stride))


def saved_bytes(t: torch.Tensor) -> int:
    """What a layout-keeping copy of t takes on disk: its extent, not its element count (an
    expanded (1024, 1024) view of a 1024-vector saves 4 KB, a half of chunk(2, -1) its gaps too)."""
    return extent(t) * t.element_size()


def flat_span(t: torch.Tensor) -> torch.Tensor:
    """The storage the tensor spans, as one contiguous 1-D view (its gaps and overlaps included)."""
    return torch.as_strided(t, (extent(t),), (1,), t.storage_offset())


# A copy keeps its tensor's storage offset modulo this many bytes: the address's alignment as the
# model gives it (torch's allocators align a storage at 64 bytes on a CPU, 512 on a GPU), so that a
# kernel that assumes 16-byte alignment or offset 0 meets a view x[1:] as misaligned as it is.
ALIGN_BYTES = 512


def aligned_offset(t: torch.Tensor | Any) -> int:
    """The elements a copy of t starts after in its storage: t's offset modulo ALIGN_BYTES."""
    offset = t.storage_offset() if isinstance(t, torch.Tensor) else t.storage_offset
    element = t.element_size() if isinstance(t, torch.Tensor) else torch.empty((), dtype=t.torch_dtype).element_size()
    return offset % max(1, ALIGN_BYTES // element)


def strided_like(span: torch.Tensor, like: Any) -> torch.Tensor:
    """span's values (extent(like) of them, 1-D) in like's layout: shape, strides and the
    offset's alignment (aligned_offset); like is a tensor or a Placeholder."""
    pad = aligned_offset(like)
    if pad:
        span = torch.cat([span.new_zeros(pad), span])
    return torch.as_strided(span, tuple(like.shape), tuple(like.stride() if isinstance(like, torch.Tensor)
                                                            else like.stride), pad)


def layout_copy(t: torch.Tensor, device: torch.device | str | None = None) -> torch.Tensor:
    """A detached copy with the same shape and strides, on `device`: gaps between rows and stride-0
    (broadcast) dimensions kept, and the storage offset's alignment (aligned_offset). clone() makes
    a non-dense view contiguous, and copy_() into empty_strided refuses a stride-0 destination (an
    expanded model input ended in a traceback)."""
    device = t.device if device is None else device
    pad = aligned_offset(t)
    span = torch.empty(pad + extent(t), dtype=t.dtype, device=device)
    span[pad:].copy_(flat_span(t.detach()))
    return torch.as_strided(span, t.shape, t.stride(), pad)


def strided_copy(x: Any) -> Any:
    """layout_copy of a tensor; anything else as it is."""
    return layout_copy(x) if isinstance(x, torch.Tensor) else x


def save_sample(args: Any, kwargs: Any, outputs: list[torch.Tensor], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    args, kwargs, outputs = tree_map(encode_value, (list(args), kwargs, list(outputs)))
    torch.save({"args": args, "kwargs": kwargs, "outputs": outputs}, path)


def load_sample(path: Path) -> tuple[list[Any], dict[str, Any]]:
    """Load a saved (args, kwargs) exactly: dtype, strides and values as captured; a tensor that was
    over the sample caps comes back as its Placeholder."""
    blob = torch.load(path, weights_only=False, map_location="cpu")
    return decode_tree(blob["args"]), decode_tree(blob["kwargs"])


def load_sample_outputs(path: Path) -> list[torch.Tensor]:
    """The outputs the op gave on that sample in the model, as the model ran it; none for a sample
    with placeholders (they came from values that were not saved)."""
    return torch.load(path, weights_only=False, map_location="cpu").get("outputs", [])
