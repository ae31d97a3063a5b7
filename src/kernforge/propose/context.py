"""What a proposer is told when it is asked for a candidate: one ProposalContext.

The search engine builds one per expansion (search/engine.py), at the moment the
proposer is called, so that it holds every result in so far: the task's facts, the
machine's (measured in the baseline worker), the parent with its source, result and
files, the lineage, the failures not to repeat, the analyst's last word, and the budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernforge.records.evaluation import EvalResult
from kernforge.records.proposal import Failure, Proposal
from kernforge.records.task import KernelTask


@dataclass
class TaskFacts:
    op: str
    schema: str  # the ATen schema: argument names, types, defaults, aliasing
    inputs: list[dict[str, Any]]  # per tensor argument: position, shape, dtype, stride
    scalars: list[Any]  # the non-tensor arguments, as the op is called with them
    outputs: list[dict[str, Any]]  # shape, dtype, stride of each output
    bytes_moved: int  # every input read once and every output written once: the memory floor
    share: float  # of the model's time
    eager_p50_ms: float | None
    compile_p50_ms: float | None
    # Why compile_p50_ms is None where the run asks for a peer: not timed until a candidate beats
    # eager (records.evaluation.PEER_PENDING); "" where it is timed or none is asked
    compile_note: str = ""

    def floor_ms(self, bandwidth_gb_s: float | None) -> float | None:
        """The time to move bytes_moved at the measured bandwidth: no memory-bound kernel beats it."""
        if not bandwidth_gb_s:
            return None
        return self.bytes_moved / (bandwidth_gb_s * 1e9) * 1e3


@dataclass
class Attempt:
    """An evaluated candidate, as a proposer sees it."""

    node_id: str
    parent_id: str | None
    proposal: Proposal
    result: EvalResult
    files: Path | None = None  # its node folder: the log, the build (registers, spills)

    @property
    def speedup(self) -> float | None:
        return self.result.speedup_vs_eager if self.result.ok else None


@dataclass
class Seed:
    """A sibling's best candidate, where a task starts: a task already searched in this run with
    the same op, dtypes and backend, differing only in sizes and strides (search/siblings.py).
    Its result was measured on the sibling's shape, not on this task's."""

    task_id: str  # the sibling task
    shape: str  # its shape, as KernelTask.shape_text says it
    attempt: Attempt  # its best candidate: proposal (params, source), result, files
    # it beat eager beyond the noise there: a found kernel, from which a few candidates without
    # improvement end the task early (search/engine.py SEEDED_PATIENCE)
    winner: bool = False

    @property
    def label(self) -> str:
        """How events, rationales and stop reasons name it: the sibling's task and node."""
        return f"{self.task_id}/{self.attempt.node_id}"


@dataclass
class ProposalContext:
    task: KernelTask
    backend: str
    facts: TaskFacts
    hardware: dict[str, Any]  # harness/hardware.py's facts: device, bandwidth, caches
    parent: Attempt | None  # the node to expand; None: a first candidate
    lineage: list[Attempt] = field(default_factory=list)  # the parent's ancestors, root first, parent last
    best: Attempt | None = None  # the fastest correct candidate so far
    recent: list[Attempt] = field(default_factory=list)  # the last few finished, newest last
    tried: list[Proposal] = field(default_factory=list)  # every proposal so far, pending ones included
    failures: list[Failure] = field(default_factory=list)
    advice: dict[str, Any] = field(default_factory=dict)  # the analyst's last recommendation on this lineage
    candidates_left: int = 0  # the task's search budget still to spend
    repair_depth: int = 0  # failed candidates in a row ending at the parent
    # a sibling's best candidate to start from: a first candidate (parent None) is that point
    # (the built-in proposer) or an adaptation of its source (an LLM); None: no sibling searched
    seed: Seed | None = None


def task_facts(task: KernelTask, eager_p50_ms: float | None, compile_p50_ms: float | None,
               compile_note: str = "") -> TaskFacts:
    from kernforge.tasks import chain_program, resolve_op

    inputs, scalars = [], []
    for position, arg in enumerate(task.args):
        if isinstance(arg, dict) and "shape" in arg:
            inputs.append({"position": position, **{k: arg[k] for k in ("shape", "dtype", "stride") if k in arg}})
        else:
            scalars.append(arg)
    outputs = [{k: o[k] for k in ("shape", "dtype", "stride") if k in o} for o in task.outputs]
    moved = sum(_bytes(t) for t in inputs) + sum(_bytes(o) for o in outputs)
    try:
        schema = chain_program(task.chain) if task.chain else str(resolve_op(task.op)._schema)
    except (AttributeError, RuntimeError, ValueError):
        schema = task.op
    return TaskFacts(op=task.op, schema=schema, inputs=inputs, scalars=scalars, outputs=outputs,
                     bytes_moved=moved, share=task.share, eager_p50_ms=eager_p50_ms, compile_p50_ms=compile_p50_ms,
                     compile_note=compile_note)


def _bytes(meta: dict[str, Any]) -> int:
    if "shape" not in meta:
        return 0
    dtype = getattr(torch, str(meta.get("dtype", "")).replace("torch.", ""), None)
    return math.prod(meta["shape"]) * (dtype.itemsize if isinstance(dtype, torch.dtype) else 4)
