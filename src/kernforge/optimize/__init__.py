"""The main job: model spec -> capture -> tasks -> search per task -> run folder and summary.

By concept: options.py (what a run is asked and what it came to), prepare.py (the model loaded,
the folder made, the capture), select.py (the tasks), loop.py (the search, apply, the summary),
resuming.py (a stopped run continued)."""

from __future__ import annotations

import shutil
import time

from kernforge.capture.compiled import compile_ranking
from kernforge.errors import UserError
from kernforge.evaluate.executors import preflight
from kernforge.propose import get_proposer
from kernforge.search import get_strategy

from kernforge.optimize.loop import llm_spent, search_all, summary, time_budget, usage_of
from kernforge.optimize.options import (OnEvent, OptimizeOptions, OptimizeResult, RunInterrupted, compile_modes,
                                        options_json, parallelism)
from kernforge.optimize.prepare import capture_run, load_for_run, new_run_folder, release, run_started
from kernforge.optimize.resuming import resume
from kernforge.optimize.select import asked_signatures, choose_tasks

__all__ = ["OptimizeOptions", "OptimizeResult", "RunInterrupted", "asked_signatures", "compile_modes", "llm_spent",
           "optimize", "resume", "run_started", "summary", "usage_of"]


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
    store = new_run_folder(opts.runs_dir, loaded, options_json(opts), on_event)
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
        return search_all(opts, result, store, backend, proposer, tasks, {}, on_event, started)
    except KeyboardInterrupt:
        raise RunInterrupted(store.root) from None
