"""The main job: model spec -> capture -> tasks -> search per task -> run folder and summary."""

from __future__ import annotations

import gc
import os
import platform
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

import kernforge
from kernforge.backends import Backend, choose_backend
from kernforge.capture import Capture, OpProfile, capture_model
from kernforge.capture.compiled import compile_ranking, compile_warning
from kernforge.errors import UserError, strict
from kernforge.evaluate.executors import make_executor, preflight
from kernforge.models import LoadedModel, ModelOptions, load_model, run_forward
from kernforge.propose import ProposerOptions, Usage, get_proposer
from kernforge.search import Node, TaskOutcome, get_strategy, search_task
from kernforge.search.budget import (MIN_TASK_S, FixedCosts, TimeBudget, parse_duration, projected_gain,
                                     task_bytes)
from kernforge.search.engine import FINALISTS
from kernforge.search.nodes import BUDGET_SPENT, row_of, task_row
from kernforge.store import RUN_FORMAT, RunStore
from kernforge.store.events import (ApplyProgress, Captured, Event, NodeStarted, PhaseStarted, PhaseTimed,
                                    ProposalFailed, Resumed, RunEnded, RunStarted, SearchStopped, TasksChosen,
                                    read_events)
from kernforge.search.runs import read_baseline, run_phases
from kernforge.tasks import KernelTask, make_tasks, task_label


@dataclass
class OptimizeOptions:
    spec: str
    backend: str = "auto"
    proposer: str = "builtin"
    strategy: str = "mcts"
    iterations: int = 10
    top_k: int = 2  # 0: every op --ops names
    ops: list[str] = field(default_factory=list)  # --ops: names, signatures or profile ranks; empty: the hottest
    runs_dir: Path = Path("runs")
    candidate_timeout_s: float = 120.0
    model: ModelOptions = field(default_factory=ModelOptions)
    compile: str = "auto"  # torch.compile peers: auto | none | default | max-autotune
    parallel: int = 0  # candidates evaluated at once per device; 0: auto (4 on a GPU, 1 on a CPU)
    executor: str = "local"  # local | ray
    gpus: str = "all"  # local executor: the GPUs to spread candidates over
    ray_address: str = "local"  # ray executor: a cluster address, or "local" to start one here
    finalists: int = FINALISTS  # the best candidates evaluated again, one at a time, at a task's end
    apply: bool = True  # at the end, install the winners into the model and measure it end to end
    fuse: bool = True  # rank fused chains (capture/chains.py) beside single ops
    # rank by eager time, or by what torch.compile leaves above each op's floor as well
    # (capture/compiled.py); auto: compile on a GPU, eager on a CPU (compiling there takes tens of s)
    rank_by: str = "auto"  # auto | eager | compile
    # the whole run's time budget ("30m", "2h"; search/budget.py), apply included; "": none, the
    # iterations alone decide
    time_budget: str = ""
    llm: ProposerOptions = field(default_factory=ProposerOptions)  # --proposer llm | mixed


@dataclass
class OptimizeResult:
    run_dir: Path
    options: OptimizeOptions
    backend: str
    device: str
    capture: Capture
    outcomes: list[TaskOutcome] = field(default_factory=list)
    skipped: list[tuple[OpProfile, str]] = field(default_factory=list)
    wall_s: float = 0.0
    end_to_end: dict[str, Any] | None = None  # integrate.apply's report, or {"error": why}
    llm_usage: Usage | None = None  # what the run's LLM calls cost, resumed parts included


# Every event the run's store writes to events.jsonl (store/events.py), as it is written.
OnEvent = Callable[[Event], None]


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C once the run folder exists: every candidate that finished is in it, and the
    interrupted task goes on from them with `optimize --resume run_dir`."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(str(run_dir))
        self.run_dir = run_dir


COMPILE_MODES = {"none": (), "default": ("default",),
                 "max-autotune": ("default", "max-autotune-no-cudagraphs")}


def compile_modes(choice: str, device: str) -> tuple[str, ...]:
    """auto: torch.compile's default mode on a GPU; none on a CPU, where compiling one op
    takes ~13 s (on a 2-core x86 CPU) and its time is rarely the point."""
    if choice == "auto":
        return COMPILE_MODES["default"] if device == "cuda" else ()
    if choice not in COMPILE_MODES:
        raise UserError(f"unknown --compile '{choice}'; choose one of: auto, {', '.join(COMPILE_MODES)}")
    return COMPILE_MODES[choice]


@dataclass
class Loaded:
    backend: Backend
    device: str
    model: LoadedModel
    began: float  # time.time() when loading began: the run's start


def load_for_run(spec: str, backend_name: str, model: ModelOptions, on_event: OnEvent) -> Loaded:
    """Choose the backend and device, load the model and run it once: a model that fails is
    reported, and a Ctrl-C here stopped, before a run folder is made. The load phase is told to
    `on_event` alone (the terminal's status line): there is no folder to write it to yet."""
    began = time.time()
    on_event(PhaseStarted(phase="load"))
    backend = choose_backend(backend_name, torch.cuda.is_available())
    device = "cuda" if backend.name in ("triton", "cuda") and torch.cuda.is_available() else "cpu"
    loaded = load_model(spec, torch.device(device), model)
    run_forward(loaded)
    return Loaded(backend=backend, device=device, model=loaded, began=began)


def new_run_folder(runs_dir: Path, loaded: Loaded, config: dict[str, Any], on_event: OnEvent | None) -> RunStore:
    """The run folder, once its database and config.json are written: from then on a Ctrl-C
    leaves a folder that `optimize --resume` continues. One that comes before removes the folder,
    which holds nothing to resume from."""
    store = RunStore.create(runs_dir, loaded.model.name)
    try:
        if on_event is not None:
            store.listeners.append(on_event)
        environment = _environment(loaded.backend.name, loaded.device, loaded.model.name)
        store.db.add_tasks([])  # run.db exists: resume's test of a run folder
        store.write_json("config.json", {**config, **environment})
        store.emit(run_started({**config, **environment}, began=loaded.began))
        store.emit(PhaseTimed(phase="load", seconds=time.time() - loaded.began))
    except KeyboardInterrupt:
        shutil.rmtree(store.root, ignore_errors=True)
        raise
    return store


def capture_run(store: RunStore, loaded: Loaded, rank_by: str) -> Capture:
    """The model's ops captured into the run folder (under torch.compile too where rank_by asks,
    capture/compiled.py); what an interrupted capture left there is dropped first."""
    shutil.rmtree(store.capture_dir, ignore_errors=True)
    capture = capture_model(loaded.model, store.capture_dir,
                            under_compile=compile_ranking(rank_by, loaded.device),
                            on_phase=lambda phase: store.emit(PhaseStarted(phase=phase)))
    for phase, seconds in capture.phases.items():
        store.emit(PhaseTimed(phase=phase, seconds=seconds))
    store.emit(Captured(signatures=len(capture.profiles), op_time_ms=capture.total_time_us / 1e3,
                        ranked_by="compile" if capture.ranked_by_compile else "eager",
                        warning=compile_warning(capture)))
    return capture


def release(loaded: Loaded) -> None:
    """Drop the model once captured: the workers need its memory, on a GPU most of all."""
    loaded.model = None  # type: ignore[assignment]
    gc.collect()
    if loaded.device == "cuda":
        torch.cuda.empty_cache()


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


# Candidates evaluated at once on a GPU: their builds and checks overlap, their timings take
# the GPU one at a time. On a CPU one at a time: a second worker would share the cores being timed.
GPU_PARALLEL = 4


def parallelism(choice: int, device: str) -> int:
    if choice < 0:
        raise UserError(f"--parallel must be 0 (auto) or more, not {choice}")
    return choice or (GPU_PARALLEL if device == "cuda" else 1)


def optimize(opts: OptimizeOptions, on_event: OnEvent = lambda event: None) -> OptimizeResult:
    started = time.perf_counter()
    proposer = get_proposer(opts.proposer, opts.llm)
    get_strategy(opts.strategy)  # an unknown name fails before anything runs
    proposer.check()  # a bad endpoint, key or model: one line now, not a failure at night
    compile_modes(opts.compile, "cpu")
    compile_ranking(opts.rank_by, "cpu")  # an unknown --rank-by fails before anything runs
    parallelism(opts.parallel, "cpu")
    time_budget(opts, 0.0)  # a duration that does not parse fails before anything runs
    preflight(opts.executor, opts.ray_address)
    loaded = load_for_run(opts.spec, opts.backend, opts.model, on_event)
    store = new_run_folder(opts.runs_dir, loaded, _options(opts), on_event)
    backend, device = loaded.backend, loaded.device
    try:
        capture = capture_run(store, loaded, opts.rank_by)
        release(loaded)
        try:
            tasks, skipped = choose_tasks(store, capture, opts, proposer, backend)
        except UserError:
            shutil.rmtree(store.root, ignore_errors=True)  # a folder with nothing chosen to search
            raise
        result = OptimizeResult(run_dir=store.root, options=opts, backend=backend.name, device=device,
                                capture=capture, skipped=skipped)
        return _search_all(opts, result, store, backend, proposer, tasks, {}, on_event, started)
    except KeyboardInterrupt:
        raise RunInterrupted(store.root) from None


def asked_signatures(capture: Capture, asked: list[str]) -> set[str] | None:
    """The signatures --ops names (None: no --ops). Each item is a rank as `kernforge profile`
    prints it, a signature id, or an op with or without its namespace and overload
    (aten::_softmax.default, aten::_softmax, _softmax: every signature of that op)."""
    if not asked:
        return None
    ranked = capture.ranked(("compute", "chain"))  # the ranks `kernforge profile` prints by default
    chosen: set[str] = set()
    for item in asked:
        matched = _profiles_named(ranked, item.strip())
        if not matched:
            names = ", ".join(dict.fromkeys(p.op for p in ranked[:12]))
            raise UserError(f"--ops: this model runs no op '{item}'; it runs (hottest first, ranks 1-{len(ranked)}): "
                            f"{names}; see kernforge profile")
        chosen |= matched
    return chosen


def _profiles_named(ranked: list[OpProfile], item: str) -> set[str]:
    if item.isdigit():
        return {ranked[int(item) - 1].signature} if 1 <= int(item) <= len(ranked) else set()
    wanted = item.split("::", 1)[-1]  # the namespace is optional
    def named(op: str) -> bool:
        name = op.split("::", 1)[-1]
        return name == wanted if "." in wanted else name.split(".")[0] == wanted
    return {p.signature for p in ranked if item in (p.signature, p.op) or named(p.op)}


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
    backend = choose_backend(config["resolved_backend"], torch.cuda.is_available())
    device = config["device"]
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("this run was made on a GPU and none is visible here; resume it on a GPU machine")
    spent = sum(run_phases(store.events()).values())  # of a time budget, by the sessions before
    store.emit(run_started(config, resumed=True))
    try:
        capture = _finished_capture(store, opts, backend, say)
        if not _tasks_chosen(store):
            say(f"{run_dir}: its tasks were not chosen before it stopped; choosing them now")
            choose_tasks(store, capture, opts, proposer, backend)
        recorded = store.db.tasks()
        tasks = [KernelTask(**data) for _, _, data in recorded]
        previous = {t.task_id: previous_nodes(store, t.task_id) for t in tasks}
        # a finished task is searched again only where the budget grew past what it evaluated
        done = {task_id for task_id, state, _ in recorded
                if state == "done" and (budget == opts.iterations or len(previous[task_id]) >= budget)}
        say(_resume_line(run_dir, config, tasks, previous, done, opts.iterations, budget))
        opts.iterations = budget
        result = OptimizeResult(run_dir=store.root, options=opts, backend=backend.name, device=device,
                                capture=capture, skipped=_recorded_skips(store, capture))
        store.rewrite_results([row_of(t, n) for t in tasks for n in previous[t.task_id]])
        store.emit(Resumed(done=sorted(done), recorded_nodes={k: len(v) for k, v in previous.items()}))
        for task in tasks:
            if task.task_id in done:
                result.outcomes.append(_finished_outcome(store, task, previous[task.task_id], budget))
        pending = [t for t in tasks if t.task_id not in done]
        return _search_all(opts, result, store, backend, proposer, pending, previous, on_event, started, spent)
    except KeyboardInterrupt:
        raise RunInterrupted(store.root) from None


def _finished_capture(store: RunStore, opts: OptimizeOptions, backend: Backend,
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


def _tasks_chosen(store: RunStore) -> bool:
    """Whether the run chose its tasks: the `tasks` event, or tasks in the database (a run whose
    Ctrl-C fell between the two, or one from before the event)."""
    return bool(store.db.tasks()) or any(isinstance(e, TasksChosen) for e in store.events())


def _recorded_skips(store: RunStore, capture: Capture) -> list[tuple[OpProfile, str]]:
    """The hotter ops the run skipped, with why, as skipped.json keeps them."""
    rows = store.read_json("skipped.json") if (store.root / "skipped.json").is_file() else []
    profiles = {p.signature: p for p in capture.profiles}
    return [(profiles[r["signature"]], r["reason"]) for r in rows if r["signature"] in profiles]


def _resume_line(run_dir: Path, config: dict[str, Any], tasks: list[Any], previous: dict[str, list[Node]],
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


def _search_all(opts: OptimizeOptions, result: OptimizeResult, store: RunStore, backend: Backend,
                proposer: Any, tasks: list[Any], previous: dict[str, list[Node]], on_event: OnEvent,
                started: float, spent_s: float = 0.0) -> OptimizeResult:
    device = result.device
    executor = make_executor(opts.executor, device, parallelism(opts.parallel, device), opts.gpus,
                             opts.ray_address)
    budget = time_budget(opts, started, spent_s)
    weights = [projected_gain(_rank_gain(result.capture, task)) for task in tasks]
    fixed = FixedCosts()
    try:
        for i, task in enumerate(tasks):
            share = budget.share_s(weights[i:]) if budget else None
            spent = proposer.budget_exhausted() or (_no_time(budget, share, fixed, task, len(tasks) - i - 1)
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
                                  finalists=opts.finalists, time_share_s=share)
            if outcome.baseline is not None:
                fixed.add(sum(outcome.baseline.phases.values()), task_bytes(task.args, task.outputs))
            result.outcomes.append(outcome)
    finally:
        executor.close()
    result.wall_s = time.perf_counter() - started
    if opts.proposer != "builtin":
        result.llm_usage = llm_spent(store)
    applied = _applied_before(store) if not tasks else None  # nothing searched: the model is as it was applied
    store.write_json("summary.json", summary(result))
    if applied is not None:
        result.end_to_end = applied
        store.write_json("summary.json", summary(result))
    elif opts.apply:
        result.end_to_end = _apply(store, device == "cuda" or opts.compile not in ("auto", "none"),
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


def _no_time(budget: TimeBudget, share: float | None, fixed: FixedCosts, task: Any, more: int) -> str:
    """Why a task of a budgeted run is not started, or "": its share under MIN_TASK_S, or under
    what its baseline is expected to take."""
    left = f"{max(0.0, budget.left_s()):.0f} s left for it{f' and {more} more' if more else ''}"
    expected = fixed.expected_s(task_bytes(task.args, task.outputs))
    if share is None or share < MIN_TASK_S:
        return f"not started: the time budget had {left}, too little to search"
    if expected > share:
        return (f"not started: its baseline would take about {expected:.0f} s (as the run's others did for "
                f"their size), more than its {share:.0f} s share of the {left}")
    return ""


def _rank_gain(capture: Capture, task: Any) -> float:
    """What the ranking projected for the task's signature (eager or compiled, whichever is more)."""
    for profile in capture.profiles:
        if profile.signature == task.signature:
            return profile.rank_gain
    return task.gain_if_2x


def _applied_before(store: RunStore) -> dict[str, Any] | None:
    """The end-to-end report a finished run's summary.json holds, if any."""
    if not (store.root / "summary.json").is_file():
        return None
    return store.read_json("summary.json").get("end_to_end")


def _apply(store: RunStore, compile_model: bool, time_limit_s: float | None = None) -> dict[str, Any]:
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
                         on_progress=lambda line: store.emit(ApplyProgress(line=line))).to_json()
    except Exception as e:  # noqa: BLE001 - a kernel that fails in the model must not lose the search's results
        if strict() and not isinstance(e, UserError):
            raise
        data = store.read_json("summary.json")
        data["end_to_end"] = {"error": str(e) if isinstance(e, UserError) else
                              f"apply failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
        store.write_json("summary.json", data)
        return data["end_to_end"]


def options_from_config(config: dict[str, Any]) -> OptimizeOptions:
    fields = {k: v for k, v in config.items() if k in OptimizeOptions.__dataclass_fields__}
    fields["runs_dir"] = Path(fields.get("runs_dir", "runs"))
    fields["model"] = ModelOptions(**fields.get("model", {}))
    fields["llm"] = ProposerOptions(**fields.get("llm", {}))
    return OptimizeOptions(**fields)


def _llm_label(options: ProposerOptions) -> str:
    return " ".join(part for part in (options.llm, options.llm_model) if part)


def run_started(config: dict[str, Any], resumed: bool = False, began: float = 0.0) -> RunStarted:
    """The run_start event of a run with this config.json, from this process, which began the
    run at `began` (time.time(); 0: now)."""
    return RunStarted(began=began, model=config.get("model_name", ""), backend=config.get("resolved_backend", ""),
                      device=config.get("device", ""), device_name=config.get("device_name", ""),
                      proposer=config.get("proposer", ""), strategy=config.get("strategy", ""),
                      iterations=config.get("iterations", 0), resumed=resumed, pid=os.getpid(),
                      host=socket.gethostname())


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


def _finished_outcome(store: RunStore, task: Any, nodes: list[Node], iterations: int) -> TaskOutcome:
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


def summary(result: OptimizeResult) -> dict[str, Any]:
    return {
        "run_dir": str(result.run_dir),
        "model": result.capture.model,
        "backend": result.backend,
        "device": result.device,
        "wall_s": result.wall_s,
        "phases": run_phases(read_events(result.run_dir / "events.jsonl")),
        "tasks": [task_row(o) for o in result.outcomes],
        "skipped": [{"op": p.op, "signature": p.signature, "share": p.share, "reason": why}
                    for p, why in result.skipped],
        **({"llm": {"model": _llm_label(result.options.llm), **asdict(result.llm_usage)}} if result.llm_usage else {}),
        **({"end_to_end": result.end_to_end} if result.end_to_end is not None else {}),
    }


def _options(opts: Any) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(opts).items()}


def _environment(backend: str, device: str, model: str) -> dict[str, Any]:
    return {
        "format_version": RUN_FORMAT,
        "resolved_backend": backend, "device": device, "model_name": model,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        # an installed or exported kernel refuses another GPU architecture than this
        "device_capability": ".".join(map(str, torch.cuda.get_device_capability())) if device == "cuda" else "",
        "versions": _versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _versions() -> dict[str, str]:
    versions = {"kernforge": kernforge.__version__, "torch": torch.__version__,
                "python": platform.python_version()}
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        pass
    if shutil.which("gcc"):
        versions["gcc"] = subprocess.run(["gcc", "-dumpfullversion"], capture_output=True,
                                         text=True, check=False).stdout.strip()
    return versions
