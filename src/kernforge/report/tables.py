"""Rich tables for the terminal; the same rows go out as JSON with --json."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from kernforge.capture import Capture
from kernforge.capture.compiled import AT_FLOOR_NOTE, from_json
from kernforge.records import Comparison, EndToEnd, RouteCost, TaskRow
from kernforge.records.endtoend import AGAINST


# Where the compiled model was profiled: its time, the floor and the headroom per op, the gain
# under compile, and why an op ranks last (capture/compiled.py).
COMPILED_COLUMNS = ("compiled ms", "floor ms", "headroom ms", "if 2x, compiled", "note")


def profile_table(capture: Capture, limit: int = 25, include_kinds: tuple[str, ...] = ("compute",)) -> Table:
    compiled = capture.ranked_by_compile
    ranking = "; ranked by eager and compiled gain" if compiled else ""
    table = Table(title=f"{capture.model} on {capture.device}: "
                        f"{capture.total_time_us / 1e3:.3f} ms of captured op time per forward "
                        f"(plain forward {capture.forward_ms:.3f} ms){ranking}")
    text_columns = ("op", "module", "shape", "dtype", "note")
    names = ("rank", "op", "module", "shape", "dtype", "calls", "time ms", "share", "if 2x faster")
    for name in names + (COMPILED_COLUMNS if compiled else ()):
        table.add_column(name, justify="left" if name in text_columns else "right")
    shown = capture.ranked(include_kinds)[:limit]
    inside = _chains_holding(shown)
    for i, p in enumerate(shown):
        share = f"{p.share:.1%}" + (f" in #{inside[p.signature]}" if p.signature in inside else "")
        row = [str(i + 1), p.op, _short_module(p.module), p.shape_text, p.dtype_text, str(p.calls),
               f"{p.time_us / 1e3:.3f}", share, f"{p.gain_if_2x:.3f}x"]
        table.add_row(*row, *(_compiled_cells(p) if compiled else ()))
    if inside:
        table.caption = ("a fused chain's share is the share of its ops (\"in #N\": inside the chain ranked N), "
                         "not more time: the column does not add up across them")
    return table


def _chains_holding(shown: list[Any]) -> dict[str, int]:
    """op signature -> the rank of the first listed chain whose calls hold all of that op's."""
    inside: dict[str, int] = {}
    for rank, p in enumerate(shown, 1):
        for signature, count in ((p.chain or {}).get("covers") or {}).items():
            op = next((q for q in shown if q.signature == signature), None)
            if op is not None and count >= op.calls:
                inside.setdefault(signature, rank)
    return inside


def _compiled_cells(p: Any) -> list[str]:
    if p.compiled_us is None:  # a view, allocation or random op: not attributed
        return ["-"] * len(COMPILED_COLUMNS)
    note = AT_FLOOR_NOTE if p.at_floor else "" if p.compiled_us else "no compiled kernel names it"
    return [f"{p.compiled_us / 1e3:.3f}", f"{p.floor_us / 1e3:.3f}", f"{p.headroom_us / 1e3:.3f}",
            f"{p.gain_compiled:.3f}x", note]


def capture_summary(capture: Capture) -> str:
    lines = [capture.coverage_text, f"a recorded pass took {capture.captured_ms:.1f} ms, "
             f"{capture.overhead:.1f}x a plain one; views, copies, allocations and random ops are "
             "left out of the ranking (--include)"]
    return "\n".join(lines + compiled_summary(capture))


def compiled_summary(capture: Capture) -> list[str]:
    """What the compiled profile saw: its total, how much the ops account for, what they do not."""
    result = from_json(capture.compiled)
    if result is None or result.error:
        return []
    where = "kernel time" if result.device == "cuda" else "host time"
    lines = [f"under torch.compile: {result.total_us / 1e3:.3f} ms of {where} per forward (compiled in "
             f"{result.compile_s:.0f} s, {result.passes} forwards profiled); the ranked ops' kernels hold "
             f"{result.coverage:.1%}; floors at {result.bandwidth_gb_s:.0f} GB/s ({result.bandwidth_from}), "
             f"{result.launch_floor_us:g} us a launch"]
    if result.unmapped:
        named = ", ".join(f"{r['kernel']} {r['us'] / 1e3:.3f} ms" for r in result.unmapped[:5])
        lines.append(f"compiled time no op accounts for: {named}")
    return lines


def _short_module(path: str, width: int = 32) -> str:
    return path if len(path) <= width else "..." + path[-(width - 3):]


def results_table(rows: list[TaskRow], title: str) -> Table:
    table = Table(title=title)
    for name in ("op", "shape", "dtype", "share", "eager ms", "compile ms", "best ms",
                 "best speedup vs eager", "vs compile", "correct/tried", "verdict"):
        table.add_column(name, justify="left" if name in ("op", "shape", "dtype", "verdict") else "right")
    for r in rows:
        table.add_row(r.op, r.shape, r.dtype, f"{r.share:.1%}", _ms(r.eager_p50_ms), _compile_cell(r),
                      _ms(r.best_p50_ms), _speedup(r.best_speedup_vs_eager), _speedup(r.best_speedup_vs_compile),
                      f"{r.correct}/{r.candidates}", r.verdict)
    return table


def eval_report(report: dict[str, Any], run_folder: bool = True) -> str:
    """The full report of `kernforge eval`: the task, each check, the timings and the verdict."""
    r = report["result"]
    lines = [(f"{report['op']} {report['shape']} {report['dtype']} ({report['share']:.1%} of model time), "
             f"{report['backend']} backend on {report['device']}"), "checks:"]
    for i, label in enumerate(report["input_sets"]):
        verdict = _set_verdict(r, i)
        if i < len(r["errors"]):
            got = ", ".join(f"{e:.2e}" for e in r["errors"][i])
            eager = ", ".join(f"{e:.2e}" for e in report["eager_errors"][i])
            lines.append(f"  {label:14} error {got} (eager's {eager}): {verdict or 'not judged'}")
        else:
            lines.append(f"  {label:14} {verdict or 'not reached'}")
    lines.append(f"status: {r['status']}" + (f": {r['reason']}" if r["reason"] else ""))
    if r.get("timing"):
        t, e = r["timing"], r["eager"]
        lines.append(f"timing (ms, p20/p50/p80): candidate {t['p20_ms']:.4f}/{t['p50_ms']:.4f}/{t['p80_ms']:.4f}, "
                     f"eager {e['p20_ms']:.4f}/{e['p50_ms']:.4f}/{e['p80_ms']:.4f} (same worker)")
        verdict = "faster beyond the noise" if r["faster_than_eager"] else "not faster beyond the noise"
        lines.append(f"speedup vs eager: {r['speedup_vs_eager']:.2f}x, {verdict}")
        for mode, entry in report["compiled"].items():
            if entry.get("timing"):
                lines.append(f"torch.compile {mode}: {entry['timing']['p50_ms']:.4f} ms "
                             f"(its own worker, the same input sets); speedup {entry['timing']['p50_ms'] / t['p50_ms']:.2f}x")
            else:
                lines.append(f"torch.compile {mode}: failed: {entry.get('error')}")
        if report.get("compile_peer", "").startswith("skipped"):
            lines.append("torch.compile: not timed (the candidate did not beat eager)")
    elif r["status"] == "ok":
        lines.append("not timed (Triton's interpreter on a CPU checks correctness only)")
    if r["status"] != "ok" and r.get("log_tail"):
        lines += ["worker log (last lines):", *("  " + line for line in r["log_tail"].splitlines()[-12:])]
    if run_folder:
        lines.append(f"run folder: {report['run_dir']}")
    return "\n".join(lines)


def _set_verdict(result: dict[str, Any], i: int) -> str:
    """"pass", "fail" or "" (not judged) for input set i. A result written before results carried
    per-set verdicts passes its sets only when it passed as a whole."""
    verdicts = result.get("set_verdicts")
    if verdicts:
        return verdicts[i] if i < len(verdicts) else ""
    return "pass" if result["status"] == "ok" else ""


def candidate_lines(record: Any) -> list[str]:
    """`kernforge show`'s list: per task its candidates, one line each (node, parent, origin,
    status, p50 ms, speedup vs eager, kept, source path, rationale; a failure's reason after it),
    then the best kernel and its path."""
    lines: list[str] = []
    for task in record.tasks:
        t = task.task
        seeded = f", seeded from {task.outcome.seeded_from}" if task.outcome.seeded_from else ""
        lines.append(f"{t.task_id}: {t.op} {t.shape_text} {t.dtype_text}, "
                     f"{_count(len(task.outcome.nodes), 'candidate')}{seeded}")
        for node in sorted(task.outcome.nodes, key=lambda n: n.node_id):
            r = node.result
            p50 = f"{r.timing.p50_ms:.4f} ms" if r.timing else "-"
            why = f"; {' '.join(r.reason.split())[:100]}" if r.reason else ""
            rationale = " ".join(node.proposal.rationale.split())[:100]
            lines.append(f"  {node.node_id} <- {node.parent_id or '-':5} {node.proposal.origin:7} {r.status:13} "
                         f"{p50:>12} {_speedup(r.speedup_vs_eager):>7} {'kept' if node.kept else '    '}  "
                         f"{record.source_of(t.task_id, node)}  {rationale}{why}")
        lines.append(_best_line(record, task))
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _best_line(record: Any, task: Any) -> str:
    best = task.outcome.best
    label = "best" if task.state == "done" else "best so far"
    if best is None:
        return f"  {label}: none beat eager beyond the noise"
    final = best.final
    p50 = f"{final.timing.p50_ms:.4f} ms, " if final.timing else ""
    return (f"  {label}: {best.node_id}, {p50}{_speedup(final.speedup_vs_eager)} vs eager: "
            f"{record.source_of(task.task.task_id, best)}")


def run_json(record: Any, summary: dict[str, Any] | None) -> dict[str, Any]:
    """`kernforge show --json`: the config, the summary and every candidate as a typed row
    (numbers, booleans and nulls, results.tsv's columns plus its source path), and each task's
    best kernel."""
    from kernforge.search.nodes import row_of
    from kernforge.search.runs import run_phases

    results, best = [], []
    for task in record.tasks:
        for node in sorted(task.outcome.nodes, key=lambda n: n.node_id):
            row = row_of(task.task, node)
            results.append({**row.to_json(), "parent": row.parent or None,
                            "source_path": str(record.source_of(task.task.task_id, node))})
        winner = task.outcome.best
        final = winner.final if winner else None
        best.append({"task": task.task.task_id, "op": task.task.op, "state": task.state,
                     "node": winner.node_id if winner else None,
                     "p50_ms": final.timing.p50_ms if final and final.timing else None,
                     "speedup_vs_eager": final.speedup_vs_eager if final else None,
                     "source_path": str(record.source_of(task.task.task_id, winner)) if winner else None})
    return {"model": record.settings.model_name or None, "kind": record.settings.kind,
            "config": record.config, "summary": summary, "results": results, "best": best,
            "phases": run_phases(record.store.events())}


def runs_table(runs: list[dict[str, Any]]) -> Table:
    table = Table(title="runs")
    for name in ("run", "model", "backend", "device", "tasks", "best speedup", "end to end", "state"):
        table.add_column(name)
    for r in runs:
        table.add_row(r["run"], r["model"], r["backend"], r["device"], str(r["tasks"]),
                      _speedup(r["best_speedup"]), r.get("end_to_end", "-"), r["state"])
    return table


def _compile_cell(row: TaskRow) -> str:
    """The compile peer's median, or why there is none where one was asked (not timed yet, skipped)."""
    if row.compile_p50_ms is None and row.compile_peer.startswith(("skipped", "not timed")):
        return row.compile_peer.split(" (")[0].split(":")[0]
    return _ms(row.compile_p50_ms)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def end_to_end_tables(report: EndToEnd) -> list[Any]:
    """`kernforge apply`'s result: the model four ways, then each kernel's effect in it."""
    items: list[Any] = []
    if report.timings_ms:
        timing = Table(title=f"{report.model} end to end on {report.device} (median ms, p20-p80)")
        for name in ("variant", "p50 ms", "p20-p80 ms", "speedup", "against", "verdict"):
            timing.add_column(name, justify="left" if name in ("variant", "against", "verdict") else "right")
        for variant, t in report.timings_ms.items():
            base = AGAINST.get(variant)
            comparison = report.comparison(variant, base) if base else None
            timing.add_row(str(variant), f"{t.p50_ms:.3f}", f"{t.p20_ms:.3f}-{t.p80_ms:.3f}",
                           _speedup(comparison.speedup if comparison else None) if base else "", str(base or ""),
                           _comparison_text(comparison))
        items.append(timing)
    if report.kernels:
        kernels = Table(title="each kernel alone in the model (a speedup only beyond the noise)")
        for name in ("task", "op", "op alone", "calls", "eager", "under compile", "installed", "note"):
            kernels.add_column(name, justify="right" if name in ("op alone", "calls") else "left")
        for k in report.kernels:
            where = [m for m, on in (("eager", k.installed_eager), ("compile", k.installed_compile)) if on]
            kernels.add_row(k.task, k.op, _speedup(k.op_speedup_vs_eager), str(k.calls_per_forward),
                            _effect(k.eager_speedup, k.eager_verdict or ""), _effect(k.compile_speedup, k.compile_text),
                            " + ".join(where) or "no", k.note)
        items.append(kernels)
    failed = [c for c in report.checks if not c.passed]
    checked = {c.variant for c in report.checks}
    if checked:
        items.append(f"outputs checked ({', '.join(sorted(checked))}) on "
                     f"{len({c.inputs for c in report.checks})} input sets, {report.tolerance}: "
                     + (f"{len(failed)} failed: " + "; ".join(f"{c.variant} on {c.inputs}: {c.why[:120]}"
                                                              for c in failed) if failed else "all within tolerance"))
    items += [_route_line(r) for r in report.routing]
    for task, why in report.not_installed.items():
        items.append(f"not installed, {task}: {why}")
    if report.time_limit_s is not None:
        items.append(_rounds_line(report))
    items += report.notes
    if report.note:
        items.append(report.note)
    return items


def _comparison_text(c: Comparison | None) -> str:
    """A comparison's verdict, with its repeat (the second, interleaved measurement) where one ran."""
    if c is None:
        return ""
    if not c.repeat_speedup:
        return c.verdict_text
    first = f"; first {c.first_verdict}" if c.first_verdict else ""
    return f"{c.verdict_text} (repeat {c.repeat_speedup:.2f}x, {c.repeat_verdict}{first})"


def _route_line(r: RouteCost) -> str:
    """One kernel's route, what it costs a call that takes it and one that falls back."""
    via = {"module": " at its module's forward", "modules": " at its modules' calls",
           "placeholders": " through placeholders"}.get(r.via, "")
    aten = f", {r.aten_us:.1f} us for the ATen call it replaces" if r.aten_us is not None else ""
    return (f"routing {r.kernel}{via} ({'native' if r.native else 'Python'}): {r.hit_overhead_us:+.1f} us per call "
            f"taking the kernel{_unmeasured(r.hit_overhead_us, r.hit_spread_us)} ({r.routed_hit_us:.1f} us against "
            f"its direct call's {r.direct_us:.1f}{aten}), {r.miss_overhead_us:+.1f} us per call falling back"
            f"{_unmeasured(r.miss_overhead_us, r.miss_spread_us)}; an unpatched op "
            f"{r.unpatched_op_us:.1f} -> {r.unpatched_op_patched_us:.1f} us")


def _unmeasured(overhead_us: float, spread_us: float | None) -> str:
    """Said where a route's cost is inside its rounds' spread: no such cost was measured."""
    if spread_us is None or abs(overhead_us) > spread_us:
        return ""
    return f" (within the rounds' spread of {spread_us:.1f} us: not measured)"


def _rounds_line(report: EndToEnd) -> str:
    """How apply's time limit sized its timings: the rounds each measurement ran."""
    from kernforge.integrate.pace import rounds_span

    rounds = [m.rounds for m in report.rounds]
    ran = f"{rounds_span(rounds)} timing rounds in each of {len(rounds)} measurements" if rounds else "no timing ran"
    return f"apply's time limit {report.time_limit_s:.0f} s: {ran}, in {report.wall_s:.0f} s"


def _effect(speedup: float | None, verdict: str) -> str:
    if not verdict:
        return "-"
    if speedup is None or verdict.startswith("not "):
        return verdict
    return f"{speedup:.3f}x, {verdict}"


def phases_line(seconds: dict[str, float]) -> str:
    """Where a run's time went, in one line: each phase that took any, with its share."""
    total = sum(seconds.values())
    parts = [f"{name.replace('_', ' ')} {s:.1f} s ({100 * s / total:.0f}%)" for name, s in seconds.items()
             if s >= 0.05 and total]
    return f"time by phase ({total:.0f} s): " + ", ".join(parts) if parts else "time by phase: none recorded"
