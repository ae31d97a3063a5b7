"""What the runtime needs to know of a backend to hold its installed kernels: plain data.

The Backend record (kernforge.backends) carries one; an exported package's manifest carries one per
kernel, as JSON, because the runtime (this folder, which every package copies) imports nothing of
kernforge outside it: it knows a backend by these facts, never by its name. This file needs nothing
but the standard library.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# How an installed kernel's file becomes its callable (router.py's load_entry):
#   module   a Python file imported, its kf_forward called with the op's arguments;
#   library  a shared library's kf_forward called through the C ABI (native_abi.py),
#            writing into outputs the runtime allocates.
ARTEFACTS = ("module", "library")


@dataclass(frozen=True)
class Loading:
    device: str  # the torch device type its tensors live on: "cpu" or "cuda"
    artefact: str  # one of ARTEFACTS
    # The C ABI launches on the default stream: a call made on another stream would race, so such
    # a kernel runs only where the current stream is the default one.
    default_stream_only: bool = False

    @property
    def dispatch_key(self) -> str:
        """The dispatcher key its custom op and routes register under ("CPU", "CUDA")."""
        return self.device.upper()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Loading:
        return cls(**data)
