"""A stopped run continued from its folder: what it finished stays, the rest runs on."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from kernforge.backends import Backend, choose_backend
from kernforge.capture import Capture, OpProfile
from kernforge.errors import UserError
from kernforge.propose import get_proposer
from kernforge.records.config import RunConfig
from kernforge.records.nodes import Node, TaskOutcome
from kernforge.records.task import KernelTask
from kernforge.search.nodes import BUDGET_SPENT, row_of
from kernforge.store import RunStore
from kernforge.store.events import (PhaseTimed,
                                    Resumed, SearchStopped, TasksChosen)
from kernforge.search.runs import read_baseline, run_phases
from kernforge.tasks import task_label

from kernforge.optimize.loop import llm_spent, search_all
from kernforge.optimize.options import OnEvent, OptimizeOptions, OptimizeResult, RunInterrupted, options_from_config
from kernforge.optimize.prepare import capture_run, load_for_run, release, run_started
from kernforge.optimize.select import choose_tasks


def resume(run_dir: Path, on_event: OnEvent = lambda event: None, iterations: int | None = None,
           say: Callable[[str], None] = lambda line: None) -> OptimizeResult:
    """Continue a run that stopped (killed, crashed, interrupted): finished tasks are kept as they
    are, an unfinished one goes on from its recorded nodes with what is left of its budget. A
    larger `iterations` raises the budget of every task, finished ones included, whose search
    goes on from its saved tree; `say` gets one line on what is continued, with what budget."""
    from kernforge.search.nodes import previous_nodes

    started = time.perf_counter()
    if not (run_dir / "config.json").is_file() or not (run_dir / "run.db").is_file():
        raise UserError(f"'{run_dir}' is not a kernforge run folder with a database (config.json, run.db)")
    store = RunStore(run_dir, listeners=[on_event])
    config = store.read_json("config.json")
    opts = options_from_config(config)
    budget = max(opts.iterations, iterations or 0)
    if iterations and iterations < opts.iterations:
        say(f"warning: --iterations {iterations} is below this run's {opts.iterations}: a budget only grows; "
            f"continuing with {opts.iterations}")
    if budget != opts.iterations:  # written first, so that a resume of this resume keeps it
        config = {**config, "iterations": budget}
        store.write_json("config.json", config)
    proposer = get_proposer(opts.proposer, opts.llm, llm_spent(store))
    proposer.check()
    settings = RunConfig.from_json(config)
    backend = choose_backend(settings.backend, torch.cuda.is_available())
    device = settings.device
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("this run was made on a GPU and none is visible here; resume it on a GPU machine")
    spent = sum(run_phases(store.events()).values())  # of a time budget, by the sessions before
    store.emit(run_started(config, resumed=True))
    try:
        capture = finished_capture(store, opts, backend, say)
        if not tasks_chosen(store):
            say(f"{run_dir}: its tasks were not chosen before it stopped; choosing them now")
            choose_tasks(store, capture, opts, proposer, backend)
        recorded = store.db.tasks()
        tasks = [KernelTask(**data) for _, _, data in recorded]
        previous = {t.task_id: previous_nodes(store, t.task_id) for t in tasks}
        # a finished task is searched again only where the budget grew past what it evaluated
        done = {task_id for task_id, state, _ in recorded
                if state == "done" and (budget == opts.iterations or len(previous[task_id]) >= budget)}
        say(resume_line(run_dir, config, tasks, previous, done, opts.iterations, budget))
        opts.iterations = budget
        result = OptimizeResult(run_dir=store.root, options=opts, backend=backend.name, device=device,
                                capture=capture, skipped=recorded_skips(store, capture))
        store.rewrite_results([row_of(t, n) for t in tasks for n in previous[t.task_id]])
        store.emit(Resumed(done=sorted(done), recorded_nodes={k: len(v) for k, v in previous.items()}))
        for task in tasks:
            if task.task_id in done:
                result.outcomes.append(finished_outcome(store, task, previous[task.task_id], budget))
        pending = [t for t in tasks if t.task_id not in done]
        return search_all(opts, result, store, backend, proposer, pending, previous, on_event, started, spent)
    except KeyboardInterrupt:
        raise RunInterrupted(store.root) from None


def finished_capture(store: RunStore, opts: OptimizeOptions, backend: Backend,
                      say: Callable[[str], None]) -> Capture:
    """The run's capture, or a new one where the run stopped before its capture was written
    (profile.json, written last and whole, is missing): the model loaded and captured again."""
    from kernforge.capture import load_capture

    if (store.capture_dir / "profile.json").is_file():
        return load_capture(store.capture_dir)
    say(f"{store.root}: its capture did not finish before it stopped; capturing the model again")
    loaded = load_for_run(opts.spec, backend.name, opts.model, store.emit)
    store.emit(PhaseTimed(phase="load", seconds=time.time() - loaded.began))
    capture = capture_run(store, loaded, opts.rank_by)
    release(loaded)
    return capture


def tasks_chosen(store: RunStore) -> bool:
    """Whether the run chose its tasks: the `tasks` event, or tasks in the database (a run whose
    Ctrl-C fell between the two, or one from before the event)."""
    return bool(store.db.tasks()) or any(isinstance(e, TasksChosen) for e in store.events())


def recorded_skips(store: RunStore, capture: Capture) -> list[tuple[OpProfile, str]]:
    """The hotter ops the run skipped, with why, as skipped.json keeps them."""
    rows = store.read_json("skipped.json") if (store.root / "skipped.json").is_file() else []
    profiles = {p.signature: p for p in capture.profiles}
    return [(profiles[r["signature"]], r["reason"]) for r in rows if r["signature"] in profiles]


def resume_line(run_dir: Path, config: dict[str, Any], tasks: list[Any], previous: dict[str, list[Node]],
                 done: set[str], recorded_budget: int, budget: int) -> str:
    """What --resume continues and with what budget, in one line."""
    what = f"{config.get('model_name', '?')}, {config.get('resolved_backend', '?')} backend, {config.get('strategy')}"
    per_task = ", ".join(f"{task_label(t.task_id)} {t.op} {len(previous[t.task_id])}/{budget}"
                         + (" done" if t.task_id in done else "") for t in tasks)
    grown = f", raised from {recorded_budget}" if budget != recorded_budget else ", the run's own"
    if len(done) == len(tasks):
        return (f"{run_dir} is finished ({what}; {per_task or 'no tasks'}): nothing left to search; its results "
                f"follow (a larger --iterations than {budget} searches on)")
    return (f"resuming {run_dir} ({what}): {budget} iterations per task{grown}; {len(tasks) - len(done)} of "
            f"{len(tasks)} tasks to search ({per_task})")


def finished_outcome(store: RunStore, task: Any, nodes: list[Node], iterations: int) -> TaskOutcome:
    from kernforge.search.siblings import seeded_from

    baseline = read_baseline(store, task.task_id)
    ended = [e.reason for e in store.events() if isinstance(e, SearchStopped) and e.task == task.task_id]
    # runs from before every search said why it ended recorded only early stops
    spent = len(nodes) >= iterations
    stopped = ended[-1] if ended else (f"{BUDGET_SPENT} ({len(nodes)} of {iterations} iterations)" if spent
                                       else "ended before its budget; this run did not record why")
    return TaskOutcome(task=task, baseline=baseline, nodes=nodes, stopped=stopped,
                       error="" if baseline else "its baseline failed before the run stopped",
                       seeded_from=seeded_from(store, task.task_id))
