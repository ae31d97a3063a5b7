"""A KernelTask: the reference ATen op at one signature, and where its real inputs lie."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from kernforge.capture import Capture, OpProfile


@dataclass
class KernelTask:
    task_id: str
    op: str  # qualified overload, e.g. "aten::_softmax.default"
    signature: str
    args: list[Any]  # JSON description of the arguments (tensors as shape/dtype/stride)
    outputs: list[dict[str, Any]]
    samples: list[str]  # absolute paths of the saved real (args, kwargs)
    share: float
    gain_if_2x: float
    time_us: float
    device: str

    @property
    def tensor_args(self) -> list[dict[str, Any]]:
        return [a for a in self.args if isinstance(a, dict) and "shape" in a]

    @property
    def shape_text(self) -> str:
        return " ".join("x".join(map(str, t["shape"])) for t in self.tensor_args[:2])

    @property
    def dtype_text(self) -> str:
        tensors = self.tensor_args
        return tensors[0]["dtype"].replace("torch.", "") if tensors else "-"


def resolve_op(qualified: str) -> torch._ops.OpOverload:
    """'aten::_softmax.default' -> torch.ops.aten._softmax.default."""
    namespace, rest = qualified.split("::", 1)
    name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace), name)
    return getattr(packet, overload or "default")


def make_tasks(
    capture: Capture,
    capture_dir: Path,
    top_k: int,
    why_unsupported: Callable[[KernelTask], str | None],
) -> tuple[list[KernelTask], list[tuple[OpProfile, str]]]:
    """The top_k hottest compute signatures that can be worked on, and the hotter ones skipped (with why)."""
    tasks: list[KernelTask] = []
    skipped: list[tuple[OpProfile, str]] = []
    for profile in capture.ranked():
        if len(tasks) >= top_k:
            break
        task = _task_from_profile(profile, capture_dir, capture.device, len(tasks))
        reason = "no real inputs were saved (over the sample size cap)" if not task.samples else None
        reason = reason or why_unsupported(task)
        if reason:
            skipped.append((profile, reason))
        else:
            tasks.append(task)
    return tasks, skipped


def _task_from_profile(profile: OpProfile, capture_dir: Path, device: str, rank: int) -> KernelTask:
    return KernelTask(
        task_id=f"t{rank}-{profile.signature}",
        op=profile.op,
        signature=profile.signature,
        args=profile.args,
        outputs=profile.outputs,
        samples=[str((capture_dir / s).resolve()) for s in profile.samples],
        share=profile.share,
        gain_if_2x=profile.gain_if_2x,
        time_us=profile.time_us,
        device=device,
    )


def save_task(task: KernelTask, path: Path) -> None:
    path.write_text(json.dumps(asdict(task), indent=1))


def load_task(path: Path) -> KernelTask:
    return KernelTask(**json.loads(path.read_text()))
