"""Run folders written by hand with the store's own writers, for the dashboard's and report's tests:
a finished run with correct, failed and LLM-made nodes, and pieces to break it with."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from helpers import c_softmax_source

from kernforge.records.evaluation import Baseline, EvalResult
from kernforge.records.proposal import Proposal, Usage
from kernforge.records.timing import Timing
from kernforge.store import RunStore
from kernforge.store.events import (Applied, Confirmed, NodeFinished, NodeStarted, PhaseTimed, RunEnded, RunStarted,
                                    TaskEnded, TasksChosen, TaskStarted)
from kernforge.tasks import save_task

EAGER = Timing(p20_ms=0.095, p50_ms=0.100, p80_ms=0.105, runs=50, method="cuda-events")
SECRET = "sk-test-kernforge-never-shown-0123456789"


def timing(p50: float) -> Timing:
    return Timing(p20_ms=p50 * 0.97, p50_ms=p50, p80_ms=p50 * 1.03, runs=50, method="cuda-events")


def ok(p50: float) -> EvalResult:
    return EvalResult(status="ok", errors=[[1e-7], [2e-7]], timing=timing(p50), eager=EAGER,
                      speedup_vs_eager=EAGER.p50_ms / p50, faster_than_eager=p50 < EAGER.p20_ms * 0.97)


BASELINE = Baseline(eager=EAGER, device_name="NVIDIA H200", labels=["real0", "fresh-large"],
                    eager_errors=[[5e-8], [9e-8]],
                    compiled={"default": {"timing": asdict(timing(0.080)), "error": ""}},
                    hardware={"bandwidth_gb_s": 4178.0})

# node, parent, result, origin: a correct start, a faster child (the winner), a wrong result under
# it, an LLM candidate that failed to build
NODES = [
    ("n0000", None, ok(0.094), "builtin"),  # correct, inside the noise
    ("n0001", "n0000", ok(0.050), "builtin"),
    ("n0002", "n0001", EvalResult(status="wrong_result", errors=[[0.3]], failed_check="values",
                                  reason="on real0: output 0: 12 of 3200 elements outside the tolerance; worst at "
                                         "index (1, 3, 7): 0.5 against 0.25"), "builtin"),
    ("n0003", "n0000", EvalResult(status="compile_error", failed_check="run",
                                  reason="candidate.c:3: error: expected ';' before '}'"), "llm"),
]


def write_run(runs_dir: Path, task, *, finished: bool = True, pid: int | None = None) -> RunStore:
    """A run folder as kernforge writes one: config, capture profile, events, a task with its
    baseline and nodes, a finalist's second evaluation, the tree's statistics, the summary."""
    store = RunStore.create(runs_dir, "tiny_softmax")
    store.write_json("config.json", {"format_version": 1, "model_name": "tiny_softmax", "resolved_backend": "cpu",
                                     "device": "cpu", "device_name": "cpu", "proposer": "mixed", "strategy": "mcts",
                                     "iterations": 4, "llm": {"llm": "openai:gpt-test", "llm_model": ""},
                                     "versions": {"kernforge": "0.1.0", "torch": "2.14.1"}})
    store.write_json("capture/profile.json", {"model": "tiny_softmax", "forward_ms": 0.5, "profiles": []})
    store.write_json("skipped.json", [{"op": "aten::bmm.default", "signature": "s1", "share": 0.2,
                                       "reason": "no built-in template for aten::bmm.default"}])
    store.emit(RunStarted(model="tiny_softmax", backend="cpu", device="cpu", proposer="mixed", strategy="mcts",
                          iterations=4, pid=pid if pid is not None else os.getpid(), host=os.uname().nodename))
    store.emit(TasksChosen(tasks=[{"task": task.task_id, "op": task.op, "shape": task.shape_text, "share": task.share}],
                           skipped=[]))
    task_dir = store.task_dir(task.task_id)
    save_task(task, task_dir / "task.json")
    store.write_json(f"tasks/{task.task_id}/baseline.json", asdict(BASELINE))
    store.emit(PhaseTimed(phase="capture", seconds=12.0))
    store.emit(PhaseTimed(phase="baselines", seconds=3.0, task=task.task_id))
    store.emit(TaskStarted(task=task.task_id, op=task.op, shape=task.shape_text, dtype=task.dtype_text,
                           share=task.share, iterations=4, eager_p50_ms=EAGER.p50_ms))
    for node_id, parent, result, origin in NODES:
        write_node(store, task.task_id, node_id, parent, result, origin)
    store.write_json(f"tasks/{task.task_id}/tree.json", {"strategy": "mcts", "nodes": {
        "root": {"visits": 4}, "n0000": {"visits": 4, "subtree_best_speedup": 2.0}}, "in_flight": [], "thinking": 0})
    if finished:
        again = ok(0.052)
        store.write_json(f"tasks/{task.task_id}/nodes/n0001/confirm.json", again.to_json())
        store.emit(Confirmed(task=task.task_id, node="n0001", status="ok", speedup_vs_eager=again.speedup_vs_eager))
        store.emit(TaskEnded(task=task.task_id, candidates=4, best_node="n0001",
                             best_speedup_vs_eager=again.speedup_vs_eager))
        store.write_json("integrate/apply.json", {"speedups": {
            "patched eager vs eager": {"speedup": 1.21, "verdict": "faster"},
            "patched compile vs compile": {"speedup": 1.01, "verdict": "within noise"}}})
        store.emit(Applied(kernels=["k"], speedups={"patched eager vs eager": 1.21}))
        store.write_json("summary.json", {"tasks": []})
        store.emit(RunEnded(wall_s=60.0, tasks=1, winners=1))
    return store


def write_node(store: RunStore, task_id: str, node_id: str, parent: str | None, result: EvalResult | None,
               origin: str = "builtin") -> None:
    """One node's files; result None: started, never finished."""
    body = "" if node_id == "n0000" else f"\n/* variant {node_id} */\n"
    proposal = Proposal(source=c_softmax_source() + body, rationale=f"rationale of {node_id}",
                        params={"block": 64}, origin=origin, model="gpt-test" if origin == "llm" else "",
                        usage=Usage(100, 50, 0.01, 2.0, 1) if origin == "llm" else Usage())
    folder = store.node_dir(task_id, node_id)
    (folder / "candidate.c").write_text(proposal.source)
    store.write_json(f"tasks/{task_id}/nodes/{node_id}/proposal.json", {"parent": parent, **proposal.record()})
    if origin == "llm":
        store.write_json(f"tasks/{task_id}/nodes/{node_id}/transcript.json", [
            {"agent": "generator", "model": "gpt-test", "system": "You write kernels.",
             "messages": [{"role": "user", "content": "Write a softmax."}], "reply": "```c\nint kf_forward...\n```",
             "error": "", "usage": {"prompt_tokens": 100, "completion_tokens": 50}}])
    (folder / "log.txt").write_text(f"worker log of {node_id}\n")
    store.emit(NodeStarted(task=task_id, node=node_id, parent=parent, origin=origin,
                           usage=asdict(proposal.usage)))
    if result is None:
        return
    store.write_json(f"tasks/{task_id}/nodes/{node_id}/result.json", {**result.to_json(), "kept": result.ok})
    store.emit(NodeFinished(task=task_id, node=node_id, parent=parent, status=result.status,
                            speedup_vs_eager=result.speedup_vs_eager))


