"""A KernelTask as a record: the reference ATen op (or fused chain) at one signature, where its
real inputs lie, and what it is worth to the model.

tasks makes them from a capture's profiles (tasks/task.py, with the torch that needs); the run
folder keeps each as task.json and in the database, as its fields' dict, and a worker reads it
back before building its baseline or a candidate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# How many of the samples' input tensors are the model's: all, or some or none where the rest
# were over the capture's sample caps and are drawn fresh, in the captured layout, by the
# baseline (harness.inputs.drawn_set). task.json files from before say nothing: all.
RealInputs = Literal["all", "partial", "none"]


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
    real_inputs: RealInputs = "all"
    # A fused chain (capture/chains.py): its steps and outputs; op is its name ("chain:mul+add+
    # _softmax"), args its external inputs, outputs the values it keeps. None for a single op.
    chain: dict[str, Any] | None = None

    @property
    def inputs_note(self) -> str:
        """What a result row says of inputs that are not all the model's ("" when they are)."""
        if self.real_inputs == "all":
            return ""
        which = "its real inputs were" if self.real_inputs == "none" else "some real inputs were"
        return f"searched on fresh inputs of the captured signature: {which} over the sample cap"

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
