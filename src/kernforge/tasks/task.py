"""KernelTasks (records.task) made from a capture's profiles: the reference ATen op at one signature,
and where its real inputs lie."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

from kernforge.capture import Capture, OpProfile
from kernforge.records.task import KernelTask


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
    fuse: bool = True,
    only: set[str] | None = None,
) -> tuple[list[KernelTask], list[tuple[OpProfile, str]]]:
    """The top_k hottest compute signatures and fused chains that can be worked on, and the hotter
    ones skipped (with why).

    A chain and its own pieces are never both searched as if their gains added up: once a chain
    is chosen, a single op whose every call runs inside chosen chains leaves the list (it frees
    its place), and one with some calls inside them keeps only the share of its other calls.
    `only`, where given, holds the signatures a user named (optimize --ops): no other is considered."""
    tasks: list[KernelTask] = []
    skipped: list[tuple[OpProfile, str]] = []
    chosen: dict[str, OpProfile] = {}  # task id -> its profile
    covered: dict[str, tuple[int, str]] = {}  # op signature -> (calls inside chosen chains, a chain's signature)
    for profile in capture.ranked(("compute", "chain") if fuse else ("compute",)):
        if len(tasks) >= top_k:
            break
        if only is not None and profile.signature not in only:
            continue
        if profile.kind == "compute" and covered.get(profile.signature, (0, ""))[0] >= profile.calls:
            skipped.append((profile, f"its calls run inside the fused chain {covered[profile.signature][1]}"))
            continue
        task = _task_from_profile(profile, capture_dir, capture.device, len(tasks))
        reason = "no input sample was saved" if not task.samples else why_not_drawable(profile)
        reason = reason or why_unsupported(task)
        if reason:
            skipped.append((profile, reason))
            continue
        tasks.append(task)
        chosen[task.task_id] = profile
        if profile.chain:
            for signature, count in profile.chain["covers"].items():
                covered[signature] = (covered.get(signature, (0, ""))[0] + count, profile.signature)
            tasks = _without_covered(tasks, chosen, covered, skipped)
    if capture.ranked_by_compile:
        skipped += _passed_over_at_floor(capture.ranked(("compute", "chain") if fuse else ("compute",)),
                                         [chosen[t.task_id] for t in tasks], skipped, only)
    for task in tasks:  # the share left to a single op some of whose calls a chain took
        inside = covered.get(task.signature, (0, ""))[0] if not task.chain else 0
        if inside:
            calls = chosen[task.task_id].calls
            task.time_us *= (calls - inside) / calls
            task.share *= (calls - inside) / calls
            task.gain_if_2x = 1.0 / (1.0 - task.share / 2.0)
    return _renumbered(tasks), skipped


def _passed_over_at_floor(ranked: list[OpProfile], chosen: list[OpProfile], skipped: list[tuple[OpProfile, str]],
                          only: set[str] | None) -> list[tuple[OpProfile, str]]:
    """The candidates compile runs at their floor that eager time would have chosen (as hot as a
    chosen one, or any when none was), each with why it was not: ranked by their eager gain alone,
    they lost their place to one compile leaves room in."""
    from kernforge.capture.compiled import floor_note

    seen = {p.signature for p in chosen} | {p.signature for p, _ in skipped}
    coolest = min((p.time_us for p in chosen), default=0.0)
    return [(p, floor_note(p)) for p in ranked
            if p.at_floor and p.signature not in seen and p.time_us >= coolest
            and (only is None or p.signature in only)]


def _without_covered(tasks: list[KernelTask], chosen: dict[str, OpProfile], covered: dict[str, tuple[int, str]],
                     skipped: list[tuple[OpProfile, str]]) -> list[KernelTask]:
    kept = []
    for task in tasks:
        inside, chain = covered.get(task.signature, (0, ""))
        if not task.chain and inside >= chosen[task.task_id].calls:
            skipped.append((chosen[task.task_id], f"its calls run inside the fused chain {chain}"))
        else:
            kept.append(task)
    return kept


def make_task_id(rank: int, signature: str) -> str:
    """A task's id: its rank in the run's list, then its signature (t0-3f9a...)."""
    return f"t{rank}-{signature}"


def task_label(task_id: str) -> str:
    """The rank part of a task id ("t0"), what lines about many tasks name a task by."""
    rank, _, _signature = task_id.partition("-")
    return rank


def _renumbered(tasks: list[KernelTask]) -> list[KernelTask]:
    """Task ids by final rank (t0, t1, ...), as the list reads after chains took their pieces' places."""
    for rank, task in enumerate(tasks):
        task.task_id = make_task_id(rank, task.signature)
    return tasks


# Ops whose output shapes (or results on the host) follow their input values: integer or bool
# inputs drawn for them would give another signature (nonzero, masked_select, repeat_interleave).
_VALUE_SHAPED = (torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output)


def why_not_drawable(profile: OpProfile) -> str | None:
    """Why the inputs over the sample caps cannot be drawn, if they cannot. Floating ones can
    (N(0, 1)); an integer or bool one within its captured range (an index stays in bounds), on an
    op whose output shape does not follow the values."""
    value_shaped = bool(profile.placeholders) and not profile.chain and \
        any(t in resolve_op(profile.op).tags for t in _VALUE_SHAPED)
    for meta in profile.placeholders:
        dtype = getattr(torch, meta["dtype"].replace("torch.", ""))
        if dtype.is_floating_point:
            continue
        what = f"its {meta['dtype'].replace('torch.', '')} input {'x'.join(map(str, meta['shape']))} is over " \
               "the sample cap and"
        if dtype.is_complex:
            return f"{what} complex values are not drawn"
        if meta.get("low") is None:
            return f"{what} no range of its values was recorded to draw from"
        if value_shaped:
            return f"{what} the output shape of {profile.op} depends on its values: no safe values to draw"
    return None


def _task_from_profile(profile: OpProfile, capture_dir: Path, device: str, rank: int) -> KernelTask:
    return KernelTask(
        task_id=make_task_id(rank, profile.signature),
        op=profile.op,
        signature=profile.signature,
        args=profile.args,
        outputs=profile.outputs,
        samples=[str((capture_dir / s).resolve()) for s in profile.samples],
        share=profile.share,
        gain_if_2x=profile.gain_if_2x,
        time_us=profile.time_us,
        device=device,
        real_inputs=profile.real_inputs,
        chain=profile.chain,
    )


def save_task(task: KernelTask, path: Path) -> None:
    path.write_text(json.dumps(asdict(task), indent=1))


def load_task(path: Path) -> KernelTask:
    return KernelTask(**json.loads(path.read_text()))
