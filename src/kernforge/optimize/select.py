"""Which of the captured signatures are searched: the top-k that can be, or those --ops names."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any


from kernforge.backends import Backend
from kernforge.capture import Capture, OpProfile
from kernforge.errors import UserError
from kernforge.records.task import KernelTask
from kernforge.store import RunStore
from kernforge.store.events import (TasksChosen)
from kernforge.tasks import make_tasks

from kernforge.optimize.options import OptimizeOptions


def choose_tasks(store: RunStore, capture: Capture, opts: OptimizeOptions, proposer: Any,
                 backend: Backend) -> tuple[list[KernelTask], list[tuple[OpProfile, str]]]:
    """The tasks to search (and the hotter ops skipped, with why), recorded in the run: skipped.json,
    the database, then the `tasks` event, the mark that the choice is made."""
    only = asked_signatures(capture, opts.ops)
    tasks, skipped = make_tasks(capture, store.capture_dir, opts.top_k or len(capture.profiles),
                                lambda t: proposer.why_unsupported(t, backend.name), fuse=opts.fuse, only=only)
    store.write_json("skipped.json", [{"op": p.op, "signature": p.signature, "share": p.share, "reason": why}
                                      for p, why in skipped])
    store.db.add_tasks([(t.task_id, asdict(t)) for t in tasks])
    store.emit(TasksChosen(tasks=[{"task": t.task_id, "op": t.op, "shape": t.shape_text, "share": t.share}
                                  for t in tasks],
                           skipped=[{"op": p.op, "share": p.share, "reason": why} for p, why in skipped]))
    return tasks, skipped


def asked_signatures(capture: Capture, asked: list[str]) -> set[str] | None:
    """The signatures --ops names (None: no --ops). Each item is a rank as `kernforge profile`
    prints it, a signature id, or an op with or without its namespace and overload
    (aten::_softmax.default, aten::_softmax, _softmax: every signature of that op)."""
    if not asked:
        return None
    ranked = capture.ranked(("compute", "chain"))  # the ranks `kernforge profile` prints by default
    chosen: set[str] = set()
    for item in asked:
        matched = profiles_named(ranked, item.strip())
        if not matched:
            names = ", ".join(dict.fromkeys(p.op for p in ranked[:12]))
            raise UserError(f"--ops: this model runs no op '{item}'; it runs (hottest first, ranks 1-{len(ranked)}): "
                            f"{names}; see kernforge profile")
        chosen |= matched
    return chosen


def profiles_named(ranked: list[OpProfile], item: str) -> set[str]:
    if item.isdigit():
        return {ranked[int(item) - 1].signature} if 1 <= int(item) <= len(ranked) else set()
    wanted = item.split("::", 1)[-1]  # the namespace is optional
    def named(op: str) -> bool:
        name = op.split("::", 1)[-1]
        return name == wanted if "." in wanted else name.split(".")[0] == wanted
    return {p.signature for p in ranked if item in (p.signature, p.op) or named(p.op)}
