"""What the dashboard and the shared report show, made from a run folder as far as it can be read.

Each function takes a PartialRun (search.runs.read_run_partial) and returns plain data for a
template: the runs list's row, a run's header and hot-op table, the plots, a task's tree and a
node's details. The live dashboard (ui/) and `kernforge report` render the same views.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernforge.backends import REGISTRY
from kernforge.backends.build_report import resource_usage, summarise
from kernforge.evaluate.judge import CHECKS
from kernforge.propose.context import task_facts
from kernforge.records import Comparison, EndToEnd, TaskRow, VariantName
from kernforge.records.nodes import Node
from kernforge.report.svg import Series, Spread, TreePoint, line_plot_svg, timing_svg, tree_svg
from kernforge.phases import PHASES, phase_text
from kernforge.store.events import NodeFinished, PhaseStarted, RunStarted
from kernforge.search.runs import NodeState, PartialRun, TaskState, run_phases

LOG_LIMIT = 64_000  # characters of a log shown; the rest is in the file


# ---------------------------------------------------------------- runs and a run

def run_row(run: PartialRun, now: float) -> dict[str, Any]:
    """One line of the runs list."""
    best = [b for b in (task_best(t) for t in run.tasks) if b]
    return {"name": run.root.name, "model": run.settings.model_name or "?",
            "device": device_text(run), "status": run.status, "elapsed_s": elapsed_s(run, now),
            "best_speedup": max(best) if best else None, "end_to_end": end_to_end(run).get("eager"),
            "tasks": len(run.tasks), "problems": len(run.problems)}


def device_text(run: PartialRun) -> str:
    c = run.config
    name = c.get("device_name") or ""
    where = f"{c.get('resolved_backend', '?')} backend on {c.get('device', '?')}"
    return where + (f" ({name})" if name and name != "cpu" else "")


def elapsed_s(run: PartialRun, now: float) -> float | None:
    if run.started is None:
        return None
    end = now if run.status == "running" else (run.last_event or now)
    return max(0.0, end - run.started)


def end_to_end_report(run: PartialRun) -> EndToEnd | None:
    """What `apply` measured of the whole model (integrate/apply.json, else summary.json's
    "end_to_end"); None where it did not run or its record cannot be read."""
    return run.applied or (run.summary.end_to_end if run.summary else None)


def end_to_end(run: PartialRun) -> dict[str, str | None]:
    """The model's own speedups where `apply` measured them, as text with apply's verdict: patched
    eager vs eager, and patched compile vs compile. A figure inside the noise says so."""
    report = end_to_end_report(run)
    if report is None:
        return {"eager": None, "compile": None, "note": None}
    return {"eager": e2e_text(report.comparison(VariantName.PATCHED_EAGER)),
            "compile": e2e_text(report.comparison(VariantName.PATCHED_COMPILE)),
            "note": report.note or report.error}


def e2e_text(comparison: Comparison | None) -> str | None:
    if comparison is None or comparison.speedup is None:
        return None
    if comparison.kernels == "none installed":
        return "none installed"
    repeat = f" (repeat {comparison.repeat_speedup:.2f}x)" if comparison.repeat_speedup else ""
    verdict = "" if comparison.installed and comparison.verdict == "faster" else f", {comparison.verdict_text}"
    return f"{comparison.speedup:.2f}x{repeat}{verdict}"


def status_counts(tasks: list[TaskState]) -> dict[str, int]:
    """Candidates per status ("ok", "wrong_result", ..., "running" for one in flight), by name."""
    counts: dict[str, int] = {}
    for t in tasks:
        for n in t.nodes:
            status = node_status(n)
            counts[status] = counts.get(status, 0) + 1
    return dict(sorted(counts.items()))


def run_header(run: PartialRun, now: float) -> dict[str, Any]:
    best = [b for b in (task_best(t) for t in run.tasks) if b]
    c = run.config
    return {"name": run.root.name, "model": c.get("model_name", "?"), "device": device_text(run),
            "status": run.status, "proposer": c.get("proposer", ""), "strategy": c.get("strategy", ""),
            "iterations": c.get("iterations"), "created": c.get("created", ""),
            "model_ms": (run.profile or {}).get("forward_ms"), "best_speedup": max(best) if best else None,
            "end_to_end": end_to_end(run), "counts": status_counts(run.tasks),
            "llm": llm_usage(run), "elapsed_s": elapsed_s(run, now), "problems": run.problems,
            "versions": c.get("versions", {}), "phases": phase_rows(run.events),
            "now": phase_now(run.events) if run.status == "running" else ""}


def phase_now(events: list[Any]) -> str:
    """What the run is doing, from its latest phase_start: "capture", "candidates (3/10)" (a
    search's count goes on with the task's finished nodes); "" for a run from before the event.
    Only this session's count: a resumed run is not still in the phase its last session was cut in."""
    session = max((i for i, e in enumerate(events) if isinstance(e, RunStarted)), default=0)
    starts = [i for i, e in enumerate(events) if i >= session and isinstance(e, PhaseStarted)]
    if not starts:
        return ""
    latest = events[starts[-1]]
    done = latest.done
    if latest.phase == "candidates":
        done = max([done or 0] + [e.candidates for e in events[starts[-1]:]
                                  if isinstance(e, NodeFinished) and e.task == latest.task])
    return phase_text(latest.phase, done, latest.total)


def phase_rows(events: list[Any]) -> list[dict[str, Any]]:
    """Where the run's time went, by phase (kernforge.phases): those that took any, with their
    share of the whole and what each covers."""
    seconds = run_phases(events)
    total = sum(seconds.values())
    return [{"phase": name.replace("_", " "), "seconds": s, "share": s / total if total else 0.0,
             "what": PHASES.get(name, "")} for name, s in seconds.items() if s >= 0.05]


def llm_usage(run: PartialRun) -> dict[str, Any] | None:
    """Tokens and money, from the events, where an LLM was used."""
    from kernforge.optimize import usage_of

    total = usage_of(run.events)
    if total.calls == 0:
        return None
    llm = run.settings.llm
    return {"model": " ".join(p for p in (llm.get("llm", ""), llm.get("llm_model", "")) if p),
            "tokens": total.tokens, "cost_usd": total.cost_usd, "calls": total.calls}


def task_best(task: TaskState) -> float | None:
    """The task's best speedup over eager beyond the noise (its confirmed finalist once it has one)."""
    outcome = task.outcome
    best = outcome.best if outcome else None
    return best.final.speedup_vs_eager if best else None


def hot_rows(run: PartialRun) -> list[dict[str, Any]]:
    """The result table's rows (optimize.task_row, the terminal's and summary.json's) with what a
    live view adds: the task's state, its candidates in flight, the projected model gain."""
    from kernforge.search.nodes import task_row

    rows = []
    for t in run.tasks:
        # a task with no task.json yet (pending): its row is what the events said of it
        row = task_row(t.outcome) if t.outcome else TaskRow(task=t.task_id, op=t.op, shape=t.shape, dtype=t.dtype,
                                                            share=t.share)
        speedup = row.best_speedup_vs_eager if row.best_node else None
        rows.append({
            "task": t.task_id, "op": row.op, "shape": row.shape, "dtype": row.dtype, "share": row.share,
            "state": t.state, "eager_ms": row.eager_p50_ms, "compile_ms": row.compile_p50_ms,
            "best_ms": row.best_p50_ms, "best_node": row.best_node, "speedup_vs_eager": speedup,
            "speedup_vs_compile": row.best_speedup_vs_compile, "compile_peer": row.compile_peer,
            "projected_gain": amdahl(t.share, speedup) if speedup else None,
            "candidates": row.candidates, "correct": row.correct,
            "running": sum(n.state == "running" for n in t.nodes), "iterations": t.iterations,
            "stopped": t.stopped, "error": t.error, "seeded_from": t.seeded_from})
    return rows


def amdahl(share: float, speedup: float) -> float:
    """The model's speedup if only this op got `speedup` faster: 1 / (1 - share + share / speedup)."""
    return 1.0 / (1.0 - share + share / speedup)


def speedup_plots(run: PartialRun) -> dict[str, str]:
    """Best speedup so far against the candidates' count and against minutes since the run
    started, one line per task (best_so_far)."""
    start = run.started or 0.0
    by_count, by_time = [], []
    for t in run.tasks:
        points = best_so_far(t)
        label = f"{t.op.replace('aten::', '')} {t.shape}"
        by_count.append(Series(label, [(float(i), best) for i, _, best in points]))
        by_time.append(Series(label, sorted(((when - start) / 60.0, best) for _, when, best in points if when)))
    return {"iterations": line_plot_svg(by_count, "candidates evaluated", "best speedup vs eager",
                                        reference_y=1.0, reference_label="eager"),
            "time": line_plot_svg(by_time, "minutes since the run started", "best speedup vs eager",
                                  reference_y=1.0, reference_label="eager")}


def best_so_far(task: TaskState) -> list[tuple[int, float | None, float]]:
    """(candidates evaluated, when, best speedup) after each finished candidate, from the first
    correct timed one: a speedup counts beyond the noise, as timed in the search, and a correct
    kernel that did not beat eager counts as eager's 1.0."""
    best, points = 0.0, []
    for i, n in enumerate((n for n in task.nodes if n.node), start=1):
        r = n.node.result
        if r.ok and r.timed:
            best = max(best, r.speedup_vs_eager if r.faster_than_eager else 1.0)
        if best:
            points.append((i, n.finished, best))
    return points


# ---------------------------------------------------------------- two runs side by side

def signature_of(task: TaskState) -> str:
    """The op signature a task searched (its task.json's); without one, its id after the rank
    ("t3-SIG" is rank 3 of SIG), so that two runs of one model match task by task."""
    if task.task is not None and task.task.signature:
        return task.task.signature
    return task.task_id.split("-", 1)[-1]


def compare_rows(a: PartialRun, b: PartialRun) -> list[dict[str, Any]]:
    """One row per op signature of either run, a's tasks first in a's order, then b's others:
    each side's task, best speedup, candidates per status; and b's best over a's."""
    b_tasks = {signature_of(t): t for t in b.tasks}
    a_signatures = [signature_of(t) for t in a.tasks]
    pairs = [(sig, t, b_tasks.get(sig)) for sig, t in zip(a_signatures, a.tasks)]
    pairs += [(sig, None, t) for sig, t in b_tasks.items() if sig not in set(a_signatures)]
    rows = []
    for sig, ta, tb in pairs:
        shown = ta or tb
        sides = {"a": compare_side(ta), "b": compare_side(tb)}
        best_a, best_b = (sides[k]["best"] if sides[k] else None for k in "ab")
        rows.append({"signature": sig, "op": shown.op, "shape": shown.shape, "dtype": shown.dtype, **sides,
                     "b_over_a": best_b / best_a if _real(best_a) and _real(best_b) and best_a else None})
    return rows


def compare_side(task: TaskState | None) -> dict[str, Any] | None:
    """One run's part of a compared row; a task that beat nothing beyond the noise counts eager's
    1.0 once it has a correct candidate (as the hot-op table shows it)."""
    if task is None:
        return None
    counts = status_counts([task])
    best = task_best(task) or (1.0 if counts.get("ok") else None)
    return {"task": task.task_id, "state": task.state, "best": best, "beat_eager": bool(task_best(task)),
            "counts": counts, "candidates": sum(counts.values())}


def end_to_end_pairs(a: PartialRun, b: PartialRun) -> list[dict[str, Any]]:
    """apply's comparisons of either run ("patched eager vs eager", ...), each as both runs' text."""
    reports = [end_to_end_report(r) or EndToEnd() for r in (a, b)]
    pairs = list(dict.fromkeys((c.candidate, c.baseline) for r in reports for c in r.comparisons))
    return [{"what": f"{candidate} vs {baseline}", **{side: e2e_text(r.comparison(candidate, baseline))
                                                      for side, r in zip("ab", reports)}}
            for candidate, baseline in pairs]


# ---------------------------------------------------------------- a task

def find_task(run: PartialRun, task_id: str) -> TaskState | None:
    return next((t for t in run.tasks if t.task_id == task_id), None)


def best_path(task: TaskState) -> set[str]:
    outcome = task.outcome
    best = outcome.best if outcome else None
    parents = {n.node_id: n.parent_id for n in task.nodes}
    path: set[str] = set()
    cursor = best.node_id if best else None
    while cursor and cursor not in path:
        path.add(cursor)
        cursor = parents.get(cursor)
    return path


def tree_for(task: TaskState, href: Any) -> str:
    """The task's tree as SVG; `href(node_id)` gives each node's link."""
    on_path = best_path(task)
    stats = task.tree.get("nodes", {})
    points = []
    for n in sorted(task.nodes, key=lambda n: n.node_id):  # children left to right in the order they were made
        points.append(TreePoint(node_id=n.node_id, parent_id=n.parent_id, status=node_status(n),
                                label=node_label(n), best_path=n.node_id in on_path, href=href(n.node_id),
                                title=node_title(n, stats.get(n.node_id)),
                                faster=bool(n.node and n.node.final.ok and n.node.final.faster_than_eager)))
    return tree_svg(points)


def node_status(n: NodeState) -> str:
    return n.node.result.status if n.node else n.state


def node_label(n: NodeState) -> str:
    if not n.node:
        return n.state
    r = n.node.final
    if r.ok:
        return f"{r.speedup_vs_eager:.2f}x" if r.speedup_vs_eager else "ok"
    return SHORT_STATUS.get(r.status, r.status)


SHORT_STATUS = {"compile_error": "build", "runtime_error": "error", "wrong_result": "wrong", "cheat": "cheat",
                "out_of_memory": "oom", "crash": "crash", "timeout": "timeout"}


def node_title(n: NodeState, stats: dict[str, Any] | None) -> str:
    """A node's tooltip: id, status, speedup and median, origin, why it was written, why it failed,
    the strategy's statistics."""
    head = f"{n.node_id}: {node_status(n)}"
    r = n.node.final if n.node else None
    if r and r.ok and _real(r.speedup_vs_eager):
        noise = "beyond the noise" if r.faster_than_eager else "within the noise"
        head += f", {r.speedup_vs_eager:.2f}x vs eager ({noise})"
        head += f", p50 {r.timing.p50_ms:.4f} ms" if r.timing and _real(r.timing.p50_ms) else ""
    if n.proposal and n.proposal.origin:
        head += f"; by {n.proposal.origin}" + (f" ({n.proposal.model})" if n.proposal.model else "")
    lines = [head]
    if n.proposal and n.proposal.rationale:
        lines.append(n.proposal.rationale[:200])
    if n.node and not n.node.result.ok:
        lines.append(n.node.result.reason[:300])
    if stats:
        best = stats.get("subtree_best_speedup")
        visits = f"visits {stats.get('visits')}"
        lines.append(f"{visits}, best below {best:.2f}x" if _real(best) else visits)
    return "\n".join(lines)


def node_rows(task: TaskState) -> list[dict[str, Any]]:
    stats = task.tree.get("nodes", {})
    rows = []
    for n in sorted(task.nodes, key=lambda n: n.node_id):
        r = n.node.result if n.node else None
        again = n.node.confirmed if n.node else None
        rows.append({"node": n.node_id, "parent": n.parent_id, "status": node_status(n),
                     "speedup": r.speedup_vs_eager if r else None,
                     "faster": bool(r and r.ok and r.faster_than_eager),
                     "p50_ms": r.timing.p50_ms if r and r.timing else None,
                     "confirmed_speedup": again.speedup_vs_eager if again else None,
                     "confirmed_faster": bool(again and again.ok and again.faster_than_eager),
                     "confirmed": bool(n.node and n.node.confirmed), "kept": bool(n.node and n.node.kept),
                     "origin": n.proposal.origin if n.proposal else "",
                     "rationale": n.proposal.rationale if n.proposal else "",
                     "reason": n.node.result.reason if n.node else "",
                     "visits": (stats.get(n.node_id) or {}).get("visits")})
    return rows


def in_flight(task: TaskState) -> dict[str, Any]:
    return {"running": [n.node_id for n in task.nodes if n.state == "running"],
            "thinking": task.tree.get("thinking", 0)}


# ---------------------------------------------------------------- a node

@dataclass
class NodeView:
    node_id: str
    parent_id: str | None
    state: str
    status: str
    source: str
    source_name: str
    language: str
    diff: str  # unified diff against the parent's source ("" for a first candidate)
    rationale: str
    params: dict[str, Any]
    changes: dict[str, Any]
    origin: str
    model: str
    usage: dict[str, Any]
    reason: str = ""
    checks: list[dict[str, str]] = field(default_factory=list)  # check, what, state: passed | failed | not reached
    errors: list[dict[str, Any]] = field(default_factory=list)  # per input set: label, candidate's, eager's
    timings: list[dict[str, Any]] = field(default_factory=list)  # who, p20, p50, p80, note
    timing_plot: str = ""  # the timings as range bars (SVG), "" when nothing was timed
    confirm: dict[str, Any] | None = None
    transcript: list[dict[str, Any]] = field(default_factory=list)
    advice: dict[str, Any] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)  # file name -> text (the tail of a long one)
    phases: dict[str, float] = field(default_factory=dict)


LANGUAGES = {".py": "python", ".cu": "cuda", ".c": "c"}


def node_view(run: PartialRun, task: TaskState, node_id: str) -> NodeView | None:
    n = next((s for s in task.nodes if s.node_id == node_id), None)
    if n is None:
        return None
    source_path = n.source
    source = n.proposal.source if n.proposal else ""
    parent = next((s for s in task.nodes if s.node_id == n.parent_id), None)
    proposal = n.proposal
    view = NodeView(
        node_id=n.node_id, parent_id=n.parent_id, state=n.state, status=node_status(n), source=source,
        source_name=source_path.name if source_path else "", language=LANGUAGES.get(source_path.suffix, "text")
        if source_path else "text", diff=source_diff(parent, n), rationale=proposal.rationale if proposal else "",
        params=proposal.params if proposal else {}, changes=proposal.changes if proposal else {},
        origin=proposal.origin if proposal else "", model=proposal.model if proposal else "",
        usage=proposal.usage.__dict__ if proposal else {}, advice=proposal.advice if proposal else {})
    if n.node:
        _fill_result(view, task, n.node)
    view.transcript = _transcript(n.folder / "transcript.json")
    view.logs = _logs(n.folder)
    if _builds_gpu_code(run.settings.backend):
        usage = summarise(resource_usage(n.folder))  # cuobjdump's registers, spills, shared memory
        if usage:
            view.logs["build report (cuobjdump -res-usage)"] = usage
    return view


def _builds_gpu_code(backend: str) -> bool:
    """Whether the backend's build folders hold GPU code (a run of a backend no longer registered: no)."""
    return backend in REGISTRY and REGISTRY[backend]().gpu_code


def source_diff(parent: NodeState | None, node: NodeState) -> str:
    if parent is None or parent.proposal is None or node.proposal is None:
        return ""
    lines = difflib.unified_diff(parent.proposal.source.splitlines(keepends=True),
                                 node.proposal.source.splitlines(keepends=True),
                                 fromfile=f"{parent.node_id}", tofile=f"{node.node_id}")
    return "".join(lines)


def _fill_result(view: NodeView, task: TaskState, node: Node) -> None:
    r = node.result
    view.reason, view.phases = r.reason, r.phases
    view.checks = check_rows(r.status, r.failed_check)
    labels = task.baseline.labels if task.baseline else []
    eager_errors = task.baseline.eager_errors if task.baseline else []
    for i, errs in enumerate(r.errors):
        view.errors.append({"set": labels[i] if i < len(labels) else f"set {i}", "candidate": errs,
                            "eager": eager_errors[i] if i < len(eager_errors) else []})
    view.timings = timing_rows(task, r)
    view.timing_plot = timing_plot(view.timings) if r.timing else ""
    if node.confirmed:
        c = node.confirmed
        rows = timing_rows(task, c)
        view.confirm = {"status": c.status, "reason": c.reason, "speedup": c.speedup_vs_eager,
                        "faster": c.faster_than_eager, "timings": rows, "plot": timing_plot(rows) if c.timing else ""}


def check_rows(status: str, failed: str) -> list[dict[str, str]]:
    """Every check in order: passed before the one that failed, not reached after it. A result
    recorded before checks were named (no failed_check) says only what its status says."""
    rows, reached = [], True
    for key, what in CHECKS.items():
        if status == "ok":
            state = "passed"
        elif not failed:
            state = "unknown"
        elif key == failed:
            state, reached = "failed", False
        else:
            state = "passed" if reached else "not reached"
        rows.append({"check": key, "what": what, "state": state})
    return rows


def timing_rows(task: TaskState, r: Any) -> list[dict[str, Any]]:
    rows = []
    if r.timing:
        rows.append({"who": "candidate", **_percentiles(r.timing), "note": r.timing.method})
    if r.eager:
        rows.append({"who": "eager (same worker)", **_percentiles(r.eager), "note": "the faster of before and after"})
    b = task.baseline
    if b and b.compiled:
        for mode, entry in b.compiled.items():
            timing = entry.get("timing")
            rows.append({"who": f"torch.compile {mode}", "p20": timing and timing["p20_ms"],
                         "p50": timing and timing["p50_ms"], "p80": timing and timing["p80_ms"],
                         "note": entry.get("error", "")[:200] if not timing else "its own worker, the same input sets"})
    if task.task and b:
        facts = task_facts(task.task, b.eager.p50_ms if b.eager else None, b.compiled_p50_ms)
        bandwidth = (b.hardware or {}).get("bandwidth_gb_s")
        floor = facts.floor_ms(bandwidth)
        if floor:
            rows.append({"who": "memory floor", "p20": None, "p50": floor, "p80": None,
                         "note": f"{facts.bytes_moved / 1e6:.2f} MB at the measured {bandwidth:.0f} GB/s"})
    return rows


def timing_plot(rows: list[dict[str, Any]]) -> str:
    """timing_rows as range bars: the candidate's p20-p50-p80 against eager's and torch.compile's."""
    def kind(who: str) -> str:
        return next((k for prefix, k in (("candidate", "candidate"), ("eager", "eager"),
                                         ("torch.compile", "compile"), ("memory floor", "floor"))
                     if who.startswith(prefix)), "other")

    return timing_svg([Spread(r["who"], r["p20"], r["p50"], r["p80"], kind(r["who"])) for r in rows])


def _percentiles(t: Any) -> dict[str, float]:
    return {"p20": t.p20_ms, "p50": t.p50_ms, "p80": t.p80_ms}


def _transcript(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text()) if path.is_file() else []
    except (OSError, ValueError):
        return [{"role": "kernforge", "text": "transcript.json cannot be read"}]
    return data if isinstance(data, list) else data.get("exchanges", []) if isinstance(data, dict) else []


def _logs(folder: Path) -> dict[str, str]:
    """The worker's log and the build's logs, as far as they exist."""
    logs = {}
    for path in [folder / "log.txt", *sorted((folder / "build").glob("*.log")), folder / "confirm" / "log.txt"]:
        if path.is_file():
            text = path.read_text(errors="replace")
            logs[str(path.relative_to(folder))] = text if len(text) <= LOG_LIMIT else \
                f"[{len(text) - LOG_LIMIT} characters before these]\n" + text[-LOG_LIMIT:]
    return logs


def _real(value: Any) -> bool:
    """A number a page can print: what a damaged file holds instead prints as "-"."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def fmt_ms(value: float | None) -> str:
    return f"{value:.4f}" if _real(value) else "-"


def fmt_x(value: float | None) -> str:
    return f"{value:.2f}x" if _real(value) else "-"


def fmt_pct(value: float | None) -> str:
    return f"{value:.1%}" if _real(value) else "-"


def fmt_duration(seconds: float | None) -> str:
    if not _real(seconds):
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
