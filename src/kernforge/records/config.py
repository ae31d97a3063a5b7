"""config.json as a record: what a run was asked (optimize's options) and where it ran (the
machine, the resolved backend, the versions), read once into fields instead of by key at each
place that needs one. The file stays the dict written; unknown keys are kept in `raw`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

RunKind = Literal["search", "eval"]  # optimize's run folder, or `kernforge eval`'s of one candidate


@dataclass(frozen=True)
class RunConfig:
    spec: str = ""  # the model spec as typed
    model_name: str = ""
    model: dict[str, Any] = field(default_factory=dict)  # ModelOptions' fields
    kind: RunKind = "search"
    backend: str = ""  # the resolved one: triton | cuda | cpu
    device: str = ""
    device_name: str = ""
    device_capability: str = ""  # "9.0" on a GPU, "" on a CPU
    versions: dict[str, str] = field(default_factory=dict)
    format_version: int = 0  # 0: written before run folders carried a version
    proposer: str = ""
    strategy: str = ""
    iterations: int = 0
    llm: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunConfig:
        return cls(spec=str(data.get("spec", "")), model_name=str(data.get("model_name", "")),
                   model=dict(data.get("model") or {}), kind="eval" if data.get("kind") == "eval" else "search",
                   backend=str(data.get("resolved_backend", "")), device=str(data.get("device", "")),
                   device_name=str(data.get("device_name", "")),
                   device_capability=str(data.get("device_capability") or ""),
                   versions=dict(data.get("versions") or {}), format_version=int(data.get("format_version", 0)),
                   proposer=str(data.get("proposer", "")), strategy=str(data.get("strategy", "")),
                   iterations=int(data.get("iterations", 0) or 0), llm=dict(data.get("llm") or {}), raw=dict(data))
