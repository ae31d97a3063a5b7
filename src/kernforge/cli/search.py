"""optimize, profile, eval, add: the commands that capture a model and search its kernels."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import typer

from kernforge.errors import UserError

from kernforge.cli import console
from kernforge.cli.app import ADD_EXAMPLES, EVAL_EXAMPLES, OPTIMIZE_EXAMPLES, PROFILE_EXAMPLES, app
from kernforge.cli.console import print_end_to_end, print_llm_usage
from kernforge.cli.options import (ATTENTION, BATCH, COMPILE, DTYPE, KERNEL_FILE, RANK_BY, RESOLUTION, RESUME, RUNS_DIR,
                                   SAVE, SCALE, SEQ_LEN, SPEC_HELP, STRICT, given, model_options, set_strict_mode)
from kernforge.cli.progress import Progress


@app.command(epilog=OPTIMIZE_EXAMPLES)
def optimize(
    ctx: typer.Context,
    spec: str | None = typer.Argument(None, help=SPEC_HELP + " (not with --resume)"),
    backend: str = typer.Option("auto", help="auto (triton on a GPU, else cpu), cpu (C + OpenMP) or "
                                             "triton (GPU; TRITON_INTERPRET=1 checks it on a CPU, untimed)"),
    proposer: str = typer.Option("builtin", help="where candidates come from: builtin (templates, no LLM), "
                                                  "llm (a kernel generator and a performance analyst on --llm), "
                                                  "or mixed (builtin moves where a template exists, the LLM for "
                                                  "rewrites and for every op no template knows)"),
    llm: str = typer.Option("", "--llm", envvar="KERNFORGE_LLM",
                            help="the LLM for --proposer llm|mixed: openai:MODEL (OPENAI_API_KEY), "
                                 "anthropic:MODEL (ANTHROPIC_API_KEY), or an OpenAI-compatible server "
                                 "http://HOST:PORT/v1 (vLLM, Ollama, llama.cpp; KERNFORGE_LLM_API_KEY if it "
                                 "wants one)"),
    llm_model: str = typer.Option("", "--llm-model", envvar="KERNFORGE_LLM_MODEL",
                                  help="the model, where --llm is a URL serving several (a server of one "
                                       "needs none), or to override it"),
    llm_max_tokens: int = typer.Option(0, "--llm-max-tokens", min=0,
                                       help="the run's token budget, every LLM call together (0: none); when "
                                            "spent, what is in flight finishes and the run ends cleanly"),
    llm_max_usd: float = typer.Option(0.0, "--llm-max-usd", min=0.0,
                                      help="the run's money budget in USD (0: none), priced by --llm-prices"),
    llm_prices: Path | None = typer.Option(None, "--llm-prices", envvar="KERNFORGE_LLM_PRICES",
                                           help='a JSON file of prices per model, {"MODEL": {"input_per_mtok": '
                                                '1.0, "output_per_mtok": 2.0}}, over the built-in list prices'),
    llm_repairs: int = typer.Option(3, "--llm-repairs", min=0,
                                    help="failed candidates in a row the generator repairs from their messages"),
    llm_timeout: float = typer.Option(180.0, "--llm-timeout", min=0.1, help="seconds one LLM request may take"),
    llm_retries: int = typer.Option(4, "--llm-retries", min=0,
                                    help="more attempts for a request that got a 429, a 5xx or no answer in "
                                         "time, with back-off (honouring Retry-After)"),
    strategy: str = typer.Option("mcts", help="search strategy: mcts (Monte Carlo Tree Search over many "
                                              "paths) or greedy (keep an improvement, revert a loss)"),
    iterations: int = typer.Option(10, min=1, help="candidates evaluated per op: the search budget (with "
                                                   "--time-budget a cap, 50 unless given)"),
    time_budget: str = typer.Option("", "--time-budget", help="the whole run's time, e.g. 30m or 2h, apply "
                                                              "included: spread over the ops by what each can "
                                                              "give the model; an op that stops improving "
                                                              "stops early (empty: the iterations decide)"),
    top_k: int = typer.Option(2, "--top-k", min=1, help="how many of the hottest supported ops to search "
                                                          "(with --ops: at most this many of those it names, "
                                                          "where given)"),
    ops: str = typer.Option("", "--ops", help="the ops to search, comma-separated, instead of the hottest: "
                                             "aten::_softmax.default, aten::_softmax or _softmax (every "
                                             "signature of the op), a signature id, or a rank as "
                                             "`kernforge profile` prints it (empty: the --top-k hottest)"),
    runs_dir: Path = RUNS_DIR,
    timeout: float = typer.Option(120.0, min=1.0, help="seconds one candidate may take: build, checks, timing"),
    batch_size: int | None = BATCH,
    seq_len: int | None = SEQ_LEN,
    resolution: int | None = RESOLUTION,
    dtype: str | None = DTYPE,
    scale: str = SCALE,
    attention: str = ATTENTION,
    compile_peer: str = COMPILE,
    strict: bool = STRICT,
    parallel: int = typer.Option(0, min=0, help="candidates evaluated at once per device (their timings "
                                                "still take the device one at a time); 0: 4 on a GPU, 1 on a CPU"),
    executor: str = typer.Option("local", help="where candidates run: local (worker processes here, one "
                                               "set per GPU) or ray (a Ray cluster, see --ray-address)"),
    gpus: str = typer.Option("all", help="local executor: the GPUs to spread candidates over, e.g. 0,1"),
    ray_address: str = typer.Option("local", help="ray executor: the cluster's address (ray://host:10001 "
                                                  "or host:6379), or local to start a cluster here"),
    # 3 is search.engine.FINALISTS, not imported here because it pulls in torch (test_cli checks)
    finalists: int = typer.Option(3, min=0, help="when a task's budget is spent, evaluate its best N "
                                                 "candidates again, one at a time, and let only those "
                                                 "results count (0: keep the search's own)"),
    fuse: bool = typer.Option(True, "--fuse/--no-fuse", help="rank fused chains of cheap ops (a hand-written "
                                                            "norm, mask then softmax, an activation after "
                                                            "a norm) beside single ops and search them"),
    rank_by: str = RANK_BY,
    apply: bool = typer.Option(True, "--apply/--no-apply", help="at the end, install the winners into the "
                                                                "model, check it end to end and time it four "
                                                                "ways (eager, patched, compile, patched compile)"),
    resume: Path | None = RESUME,
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON instead of tables"),
) -> None:
    """Profile the model, pick its K hottest ops, search faster kernels for each, print the result."""
    from kernforge.optimize import OptimizeOptions, summary
    from kernforge.optimize import optimize as run_optimize
    from kernforge.propose import ProposerOptions
    from kernforge.optimize import resume as run_resume
    from kernforge.report import phases_line, profile_table, results_table
    from kernforge.search.budget import BUDGETED_ITERATIONS

    set_strict_mode(strict)
    if (spec is None) == (resume is None):
        raise UserError("give a model spec to start a run, or --resume RUN_FOLDER to continue one (not both)")
    if resume is not None:
        _warn_ignored_on_resume(ctx)
        more = given(ctx, "iterations")
        with _interruptible(resume), Progress(quiet=as_json) as on_event:  # what it continues: said even with --json
            result = run_resume(resume, on_event, iterations=iterations if more else None,
                                say=lambda line: console.err.print(line, markup=False, highlight=False, soft_wrap=True))
    else:
        asked = [item.strip() for item in ops.split(",") if item.strip()]
        opts = OptimizeOptions(spec=spec, backend=backend, proposer=proposer, strategy=strategy,
                               iterations=iterations if time_budget == "" or given(ctx, "iterations")
                               else BUDGETED_ITERATIONS, ops=asked, time_budget=time_budget,
                               top_k=top_k if given(ctx, "top_k") or not asked else 0, runs_dir=runs_dir,
                               candidate_timeout_s=timeout, compile=compile_peer, parallel=parallel,
                               executor=executor, gpus=gpus, ray_address=ray_address, finalists=finalists,
                               apply=apply, fuse=fuse, rank_by=rank_by,
                               model=model_options(batch_size, seq_len, resolution, dtype, scale, attention),
                               llm=ProposerOptions(llm=llm, llm_model=llm_model, max_tokens=llm_max_tokens,
                                                   max_usd=llm_max_usd, prices=str(llm_prices or ""),
                                                   repairs=llm_repairs, timeout_s=llm_timeout,
                                                   retries=llm_retries))
        with _interruptible(), Progress(quiet=as_json) as on_event:
            result = run_optimize(opts, on_event)
    opts = result.options
    data = summary(result)
    if as_json:
        print(json.dumps(data.to_json(), indent=1))
        return
    console.out.print(profile_table(result.capture, limit=8))
    for reason, ops in _group_skipped(data.skipped).items():
        console.out.print(f"skipped, {reason}: {ops}", markup=False, highlight=False)
    rows = data.tasks
    if not rows:
        console.out.print(f"no op of this model has a {opts.proposer} template for the {result.backend} backend yet: "
                  "nothing was searched")
    budget = f"a time budget of {opts.time_budget}, at most " if opts.time_budget else ""
    console.out.print(results_table(rows, title=f"{result.backend} backend on {result.device}, "
                                                 f"{opts.strategy}, {budget}{opts.iterations} iterations per op, "
                                                 f"{result.wall_s:.0f} s"))
    from kernforge.tasks import task_label

    for row in rows:  # why each search ended: its budget spent, or why sooner
        if row.stopped:
            console.out.print(f"{task_label(row.task)} {row.op}: search ended, {row.stopped}",
                      markup=False, highlight=False)
    print_llm_usage(data.llm)
    print_end_to_end(data.end_to_end)
    console.out.print(phases_line(data.phases), markup=False, highlight=False, soft_wrap=True)
    console.out.print(f"run folder: {result.run_dir}")


# what --resume reads from the command line besides the run folder; the rest is the run's own
RESUME_READS = ("resume", "iterations", "as_json", "spec", "runs_dir")


def _warn_ignored_on_resume(ctx: typer.Context) -> None:
    ignored = [param.opts[0] for param in ctx.command.params
               if param.name not in RESUME_READS and given(ctx, param.name)]
    if ignored:
        console.err.print(f"warning: --resume continues with the run's own options; ignored: {', '.join(ignored)} "
                  "(a larger --iterations is the one it takes)", markup=False, highlight=False)


class _interruptible:
    """Ctrl-C during a run: one line, exit 130, never a traceback. Once the run folder exists the
    line names the exact command that continues it: every candidate that finished is already in
    the folder (the search records each as it ends), and what had not finished (the capture, the
    choice of tasks, a task's search, apply) is done again on resume. Before the folder exists
    there is nothing to continue, and no folder is left. `resumed` is the folder being resumed."""

    def __init__(self, resumed: Path | None = None) -> None:
        self.resumed = resumed

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, error: BaseException | None, tb: object) -> None:
        from kernforge.optimize import RunInterrupted

        if not isinstance(error, KeyboardInterrupt):
            return
        run_dir = error.run_dir if isinstance(error, RunInterrupted) else self.resumed
        if run_dir is not None:
            console.err.print(f"interrupted: {run_dir} keeps every candidate that finished; continue with: "
                      f"kernforge optimize --resume {shlex.quote(str(run_dir))}", markup=False,
                      highlight=False, soft_wrap=True)
        else:
            console.err.print("interrupted before the run folder was made: nothing to resume", markup=False,
                      highlight=False)
        raise typer.Exit(130)


@app.command(epilog=PROFILE_EXAMPLES)
def profile(
    spec: str = typer.Argument(..., help=SPEC_HELP),
    device: str = typer.Option("auto", help="auto (the GPU when there is one), cpu or cuda"),
    batch_size: int | None = BATCH,
    seq_len: int | None = SEQ_LEN,
    resolution: int | None = RESOLUTION,
    dtype: str | None = DTYPE,
    scale: str = SCALE,
    attention: str = ATTENTION,
    include: str = typer.Option("compute,chain", help="kinds of op to rank, comma-separated: compute, "
                                                      "chain (fused chains of cheap ops), view, copy, "
                                                      "alloc, random"),
    limit: int = typer.Option(25, min=1, help="rows to show"),
    rank_by: str = RANK_BY,
    save: Path | None = SAVE,
    as_json: bool = typer.Option(False, "--json", help="print the ranked ops as JSON"),
) -> None:
    """Capture every ATen op of one forward pass and rank them by device time."""
    from dataclasses import asdict

    from kernforge.capture import KINDS, capture_model
    from kernforge.capture.compiled import compile_ranking, compile_warning
    from kernforge.models import load_model, resolve_device, run_forward
    from kernforge.report import capture_summary, profile_table

    kinds = tuple(k.strip() for k in include.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise UserError(f"unknown op kind {', '.join(unknown)} in --include; choose from {', '.join(KINDS)}")
    loaded_options = model_options(batch_size, seq_len, resolution, dtype, scale, attention)
    compile_ranking(rank_by, "cpu")  # an unknown --rank-by is one line before the model loads
    loaded = load_model(spec, resolve_device(device), loaded_options)
    run_forward(loaded)
    capture = capture_model(loaded, out_dir=save, under_compile=compile_ranking(rank_by, loaded.device.type))
    if compile_warning(capture):
        console.err.print(compile_warning(capture), markup=False, highlight=False, soft_wrap=True)
    if save is not None:  # `kernforge eval` takes the saved capture for this model and options
        from kernforge.eval_file import capture_key, write_origin

        write_origin(save, capture_key(spec, loaded_options, str(loaded.device)))
    if as_json:
        data = asdict(capture)
        data.update(coverage=capture.coverage, coverage_warning=capture.coverage_warning,
                    overhead=capture.overhead,  # every kind, each tagged
                    ranked_by="compile" if capture.ranked_by_compile else "eager",
                    ranked=[p.signature for p in capture.ranked(kinds)])
        print(json.dumps(data, indent=1))
        return
    console.out.print(profile_table(capture, limit=limit, include_kinds=kinds))
    console.out.print(capture_summary(capture), markup=False, highlight=False)


@app.command("eval", epilog=EVAL_EXAMPLES)
def eval_command(
    spec: str = typer.Argument(..., help=SPEC_HELP),
    kernel_file: Path = KERNEL_FILE,
    backend: str = typer.Option("auto", help="auto, cpu, triton or cuda; must match the file"),
    op: str = typer.Option("", help="the op to check against, e.g. aten::_softmax.default (or aten::_softmax: "
                                    "any overload), or a signature id from `kernforge profile --json` "
                                    "(default: the file's `kf-op:` comment line)"),
    runs_dir: Path = RUNS_DIR,
    timeout: float = typer.Option(120.0, min=1.0, help="seconds the candidate may take: build, checks, timing"),
    batch_size: int | None = BATCH,
    seq_len: int | None = SEQ_LEN,
    resolution: int | None = RESOLUTION,
    dtype: str | None = DTYPE,
    scale: str = SCALE,
    attention: str = ATTENTION,
    compile_peer: str = COMPILE,
    strict: bool = STRICT,
    capture: Path | None = typer.Option(None, "--capture", help="a run folder or a `profile --save` folder "
                                                                "to take the op's inputs from (default: the "
                                                                "newest matching capture under --runs-dir, "
                                                                "else a fresh one)"),
    recapture: bool = typer.Option(False, "--recapture", help="profile the model again even where a saved "
                                                              "capture matches (a model whose code is not "
                                                              "in one file changed)"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Evaluate a hand-written kernel against an op of a model: every check, error, timing and speedup.
    The op's inputs come from a saved capture of the same model and options where there is one."""
    from kernforge.eval_file import EvalOptions, evaluate_file
    from kernforge.report import eval_report

    set_strict_mode(strict)
    model = model_options(batch_size, seq_len, resolution, dtype, scale, attention)
    report = evaluate_file(EvalOptions(spec=spec, kernel_file=kernel_file, backend=backend, op=op,
                                       runs_dir=runs_dir, candidate_timeout_s=timeout, model=model,
                                       compile=compile_peer, capture=capture, recapture=recapture))
    if as_json:
        print(json.dumps(report, indent=1))
    else:
        console.out.print(eval_report(report), markup=False, highlight=False)
    if report["result"]["status"] != "ok":
        raise typer.Exit(1)


@app.command("add", epilog=ADD_EXAMPLES)
def add_command(
    run: str = typer.Argument(..., help="a run folder, or its name under --runs-dir"),
    task: str = typer.Argument(..., help="the task's id (kernforge show RUN lists them)"),
    kernel_file: Path = KERNEL_FILE,
    parent: str | None = typer.Option(None, "--parent", help="the node it varies, for the tree (default: none)"),
    runs_dir: Path = RUNS_DIR,
    timeout: float = typer.Option(120.0, min=1.0, help="seconds the candidate may take: build, checks, timing"),
    as_json: bool = typer.Option(False, "--json", help="print the node's result as JSON"),
) -> None:
    """Add a hand-written kernel to a run's task: a node of its tree, evaluated like any other."""
    from kernforge.report import eval_report
    from kernforge.search.add import add_candidate

    root = Path(run) if Path(run).is_dir() else runs_dir / run
    added = add_candidate(root, task, kernel_file, parent, timeout)
    node, best = added.node, added.outcome.best
    final = node.final
    if as_json:
        print(json.dumps({"task": task, "node": node.node_id, "parent": node.parent_id, "kept": node.kept,
                          "result": node.result.to_json(),
                          "confirmed": node.confirmed.to_json() if node.confirmed else None,
                          "best_node": best.node_id if best else None}, indent=1))
    else:
        t, baseline = added.outcome.task, added.outcome.baseline
        console.out.print(eval_report({"op": t.op, "shape": t.shape_text, "dtype": t.dtype_text, "share": t.share,
                               "backend": added.backend, "device": added.device, "result": final.to_json(),
                               "input_sets": baseline.labels, "eager_errors": baseline.eager_errors,
                               "compiled": {}, "run_dir": str(root)}), markup=False, highlight=False)
        winner = f"the task's winner is now {best.node_id}" if best else "the task has no winner"
        console.out.print(f"added {node.node_id} to {task}: {final.status}; {winner}", markup=False, highlight=False)
    if final.status != "ok":
        raise typer.Exit(1)


def _group_skipped(skipped: list[dict[str, Any]]) -> dict[str, str]:
    grouped: dict[str, list[str]] = {}
    for s in skipped:
        reason = s["reason"].replace(f"for {s['op']}", "").strip()
        grouped.setdefault(reason, []).append(f"{s['op']} ({s['share']:.1%})")
    return {reason: ", ".join(ops) for reason, ops in grouped.items()}
