"""The search over the chosen tasks, within the run's time budget, then apply, and the run's summary."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any


from kernforge.backends import Backend
from kernforge.capture import Capture
from kernforge.errors import UserError, strict
from kernforge.evaluate.executors import make_executor
from kernforge.records import EndToEnd, RunSummary
from kernforge.records.nodes import Node, TaskOutcome
from kernforge.records.proposal import Usage
from kernforge.search import get_strategy, search_task
from kernforge.search.budget import (MIN_TASK_S, FixedCosts, TimeBudget, parse_duration, projected_gain,
                                     task_bytes)
from kernforge.search.nodes import task_row
from kernforge.store import RunStore
from kernforge.store.events import (ApplyProgress, Event, NodeStarted, PhaseStarted, ProposalFailed, RunEnded, read_events)
from kernforge.search.runs import run_phases

from kernforge.optimize.options import OnEvent, OptimizeOptions, OptimizeResult, compile_modes, parallelism
from kernforge.optimize.prepare import llm_label


def search_all(opts: OptimizeOptions, result: OptimizeResult, store: RunStore, backend: Backend,
                proposer: Any, tasks: list[Any], previous: dict[str, list[Node]], on_event: OnEvent,
                started: float, spent_s: float = 0.0) -> OptimizeResult:
    device = result.device
    executor = make_executor(opts.executor, device, parallelism(opts.parallel, device), opts.gpus,
                             opts.ray_address)
    budget = time_budget(opts, started, spent_s)
    weights = [projected_gain(rank_gain(result.capture, task)) for task in tasks]
    fixed = FixedCosts()
    try:
        for i, task in enumerate(tasks):
            nbytes = task_bytes(task.args, task.outputs)  # what the run's fixed costs are scaled by
            share = task_share(budget, weights[i:], fixed, nbytes) if budget else None
            spent = proposer.budget_exhausted() or (no_time(budget, share, fixed, nbytes, len(tasks) - i - 1)
                                                   if budget else "")
            if spent:  # the run ends cleanly: what was found stands, the rest is said
                result.outcomes.append(TaskOutcome(task=task, baseline=None, error=spent, stopped=spent))
                continue
            # tasks done so far of all the run's, finished ones of an earlier session included
            store.emit(PhaseStarted(phase="baselines", done=len(result.outcomes),
                                    total=len(result.outcomes) + len(tasks) - i, task=task.task_id))
            outcome = search_task(task, store, backend, device, proposer, get_strategy(opts.strategy),
                                  opts.iterations, opts.candidate_timeout_s,
                                  compile_modes=compile_modes(opts.compile, device),
                                  previous=previous.get(task.task_id), executor=executor,
                                  finalists=opts.finalists, time_share_s=share,
                                  confirm_factor=fixed.confirm_factor())
            if outcome.baseline is not None:
                fixed.add(sum(outcome.baseline.phases.values()), nbytes)
            for node in outcome.nodes:
                fixed.add_candidate(node.result.waited_s, nbytes)
                if node.confirmed is not None:
                    fixed.add_confirmation(node.result.waited_s, node.confirmed.waited_s)
            result.outcomes.append(outcome)
    finally:
        executor.close()
    result.wall_s = time.perf_counter() - started
    if opts.proposer != "builtin":
        result.llm_usage = llm_spent(store)
    applied = applied_before(store) if not tasks else None  # nothing searched: the model is as it was applied
    store.write_summary(summary(result))
    if applied is not None:
        result.end_to_end = applied
        store.write_summary(summary(result))
    elif opts.apply:
        result.end_to_end = apply_run_folder(store, device == "cuda" or opts.compile not in ("auto", "none"),
                                   budget.apply_s() if budget else None)
    store.emit(RunEnded(wall_s=time.perf_counter() - started, tasks=len(result.outcomes),
                        winners=sum(o.best is not None for o in result.outcomes)))
    return result


def time_budget(opts: OptimizeOptions, started: float, spent_s: float = 0.0) -> TimeBudget | None:
    """The run's time budget, counted from `started` (time.perf_counter() when this process began),
    less `spent_s` (what a resumed run's earlier sessions took), or None."""
    if not opts.time_budget:
        return None
    return TimeBudget.starting(parse_duration(opts.time_budget), started, opts.apply, spent_s)


def task_share(budget: TimeBudget, weights: list[float], fixed: FixedCosts, nbytes: int) -> float:
    """The task's share of the time left by its weight, raised to what its baseline, one candidate
    and a confirmation are expected to take where the time left holds that: a share that cannot
    buy one confirmed candidate buys nothing, and the tasks come in rank order. (A 5-minute VAE
    run gave a group norm + SiLU chain 36 s, whose first candidate alone took 58 s:
    bench/results/h100/issue32/vae-20261207b.)"""
    share = budget.share_s(weights)
    least = fixed.least_task_s(nbytes)
    return least if share < least <= budget.left_s() else share


def no_time(budget: TimeBudget, share: float | None, fixed: FixedCosts, nbytes: int, more: int) -> str:
    """Why a task of a budgeted run is not started, or "": its share under MIN_TASK_S, or under
    what its baseline, one candidate and its confirmation are expected to take."""
    left = f"{max(0.0, budget.left_s()):.0f} s left for it{f' and {more} more' if more else ''}"
    baseline, least = fixed.expected_s(nbytes), fixed.least_task_s(nbytes)
    if share is None or share < MIN_TASK_S:
        return f"not started: the time budget had {left}, too little to search"
    if baseline > share:
        return (f"not started: its baseline would take about {baseline:.0f} s (as the run's others did for "
                f"their size), more than its {share:.0f} s share of the {left}")
    if least > share:
        return (f"not started: its baseline, one candidate and its confirmation would take about {least:.0f} s "
                f"(as the run's others did for their size), more than its {share:.0f} s share of the {left}")
    return ""


def rank_gain(capture: Capture, task: Any) -> float:
    """What the ranking projected for the task's signature (eager or compiled, whichever is more)."""
    for profile in capture.profiles:
        if profile.signature == task.signature:
            return profile.rank_gain
    return task.gain_if_2x


def apply_run_folder(store: RunStore, compile_model: bool, time_limit_s: float | None = None) -> EndToEnd:
    """The winners installed into the model and measured end to end (integrate.apply, which adds
    its report to summary.json); a model that cannot be patched is said, not raised: the search's
    results stand. The model is also timed under torch.compile on a GPU, and on a CPU only where
    --compile names a mode: inductor takes tens of seconds a compile there. `time_limit_s`: what
    a time budget left for apply (TimeBudget.apply_s), None: no limit."""
    from kernforge.integrate.apply import apply_run

    run_dir = store.root
    store.emit(PhaseStarted(phase="apply"))
    store.emit(ApplyProgress(line="installing the winners into the model"))
    try:
        return apply_run(run_dir, compile_model=compile_model, time_limit_s=time_limit_s,
                         on_progress=lambda line: store.emit(ApplyProgress(line=line)))
    except Exception as e:  # noqa: BLE001 - a kernel that fails in the model must not lose the search's results
        if strict() and not isinstance(e, UserError):
            raise
        failed = EndToEnd(error=str(e) if isinstance(e, UserError) else
                          f"apply failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
        written = store.summary()
        if written is not None:  # written above, before apply began
            written.end_to_end = failed
            store.write_summary(written)
        return failed


def summary(result: OptimizeResult) -> RunSummary:
    return RunSummary(
        run_dir=str(result.run_dir), model=result.capture.model, backend=result.backend, device=result.device,
        wall_s=result.wall_s, phases=run_phases(read_events(result.run_dir / "events.jsonl")),
        tasks=[task_row(o) for o in result.outcomes],
        skipped=[{"op": p.op, "signature": p.signature, "share": p.share, "reason": why} for p, why in result.skipped],
        llm={"model": llm_label(result.options.llm), **asdict(result.llm_usage)} if result.llm_usage else None,
        end_to_end=result.end_to_end)


def llm_spent(store: RunStore) -> Usage:
    """What a run's LLM calls cost so far, from its events, so a resumed run's budget goes on
    where it stopped."""
    return usage_of(store.events())


def usage_of(events: list[Event]) -> Usage:
    """The LLM usage the events record: every proposal that came and every one that did not."""
    total = Usage()
    for event in events:
        if isinstance(event, (NodeStarted, ProposalFailed)) and event.usage:
            total = total + Usage.from_json(event.usage)
    return total


def applied_before(store: RunStore) -> EndToEnd | None:
    """The end-to-end report a finished run's summary.json holds, if any."""
    written = store.summary()
    return written.end_to_end if written else None
