"""The kernforge command line."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from kernforge.errors import UserError

try:  # typer 0.2x carries its own copy of click
    from typer._click import exceptions as click_errors
    from typer._click.globals import get_current_context
except ImportError:
    from click import exceptions as click_errors
    from click import get_current_context

def examples(*lines: str) -> str:
    """A help's closing examples, one command line each."""
    return "\n\n[bold]Examples[/bold]\n\n" + "\n\n".join(f"  {line}" for line in lines) + "\n"


RUN = "runs/20261129-120000-attention"  # a run folder as the examples name it
EXAMPLES = examples(  # the app's own help: one line per command
    "kernforge profile mypkg.models:build_resnet",
    "kernforge optimize example:attention --backend cpu --iterations 10",
    f"kernforge optimize --resume {RUN} --iterations 20",
    "kernforge eval example:attention my_softmax.py --backend triton --op aten::_softmax.default",
    f"kernforge add {RUN} t0-softmax my_softmax.py",
    "kernforge ls; kernforge show 20261129-120000-attention",
    f"kernforge apply {RUN}; kernforge export {RUN} -o attention_kernels",
    f"kernforge ui runs --open; kernforge report {RUN} -o attention.html",
)
OPTIMIZE_EXAMPLES = examples(
    "kernforge optimize example:attention --backend cpu --iterations 10",
    "kernforge optimize my_model.py --ops aten::_softmax,3 --iterations 20",
    "kernforge optimize my_model.py --backend triton --top-k 3 --json",
    "kernforge optimize my_model.py --proposer mixed --llm anthropic:claude-sonnet-4-5 --llm-max-usd 20",
    "kernforge optimize my_model.py --proposer llm --llm http://localhost:8000/v1 --llm-model qwen2.5-coder-32b",
    "kernforge optimize example:attention --time-budget 4m   # apply included",
    f"kernforge optimize --resume {RUN}",
    f"kernforge optimize --resume {RUN} --iterations 20   # every task searches on to 20",
)
PROFILE_EXAMPLES = examples(
    "kernforge profile mypkg.models:build_resnet",
    "kernforge profile example:gemma_decoder --scale small --seq-len 64",
    "kernforge profile torchvision:resnet18 --resolution 160 --include compute,chain,copy --limit 40",
    "kernforge profile my_model.py --save capture/ --json",
    "kernforge profile example:sd35_vae_decoder --rank-by compile   # what torch.compile leaves above the floor",
)
EVAL_EXAMPLES = examples(
    "kernforge eval example:attention my_softmax.py --backend triton --op aten::_softmax.default",
    "kernforge eval my_model.py my_softmax.c --backend cpu --json",
)
ADD_EXAMPLES = examples(
    f"kernforge add {RUN} t0-softmax my_softmax.py",
    "kernforge add 20261129-120000-attention t0-softmax my_softmax.c --parent n0003 --json",
)
LS_EXAMPLES = examples("kernforge ls", "kernforge ls --runs-dir /data/kernforge-runs")
APPLY_EXAMPLES = examples(
    f"kernforge apply {RUN}",
    f"kernforge apply {RUN} my_model.py --no-compile --json",
    f"kernforge apply {RUN} --time-limit 2m   # timings sized to fit two minutes",
)
UI_EXAMPLES = examples("kernforge ui --open", "kernforge ui /data/kernforge-runs --port 0")
REPORT_EXAMPLES = examples(
    f"kernforge report {RUN}",
    "kernforge report 20261129-120000-attention -o attention.html",
)
SHOW_EXAMPLES = examples(
    "kernforge show 20261129-120000-attention",
    f"kernforge show {RUN} --json",
)

app = typer.Typer(
    help="Make an unmodified PyTorch model faster: profile it, search faster kernels for its hot "
         "operators, prove them correct on its own tensors and time them honestly.",
    epilog=EXAMPLES, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode="rich",
    add_completion=False,
)
# Off a terminal rich would wrap tables at 80 columns; a log file can take wide rows.
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

SPEC_HELP = ("model spec: a KernelBench-form file.py (Model, get_inputs, get_init_inputs), "
             "pkg.module:factory returning (model, inputs), example:NAME (attention, resnet50, "
             "gemma_decoder, qwen_moe, sd35_vae_decoder), torchvision:NAME, timm:NAME, "
             "hf:CONFIG or diffusers:CONFIG (a bundled config name, a config.json or its folder)")
BATCH = typer.Option(None, "--batch-size", min=1, help="batch size (default: the model's own)")
SEQ_LEN = typer.Option(None, "--seq-len", min=1, help="tokens per sequence, for language models")
RESOLUTION = typer.Option(None, "--resolution", min=1,
                          help="image side for vision models; latent side for VAE decoders")
DTYPE = typer.Option(None, "--dtype", help="fp32, bf16 or fp16 (default: the model's own; bf16 for the bundled "
                                                   "language models and VAE on a GPU)")
RESUME = typer.Option(None, "--resume", help="continue a stopped run from its folder, with its own options "
                                           "and what is left of its budget")
SAVE = typer.Option(None, "--save", help="a folder to keep the capture in: profile.json, calls.jsonl "
                                          "and real input/output samples")
KERNEL_FILE = typer.Argument(..., help="a candidate: .c (cpu), .py (triton) or .cu (cuda)")
COMPILE = typer.Option("auto", "--compile", help="torch.compile peers timed per op: auto (default mode on a "
                                                 "GPU, none on a CPU), none, default, max-autotune; the "
                                                 "applied model is compiled too on a GPU, and on a CPU "
                                                 "where a mode is named")
RANK_BY = typer.Option("auto", "--rank-by", help="rank ops by eager time, or by torch.compile's time above "
                                                 "each op's floor as well (the model compiled and profiled; "
                                                 "an op compile runs at its floor ranks last): auto (compile "
                                                 "on a GPU, eager on a CPU, where compiling takes tens of "
                                                 "seconds), eager, compile")
SCALE = typer.Option("full", "--scale", help="bundled examples: full (real layer shapes) or small (CPU-sized)")
ATTENTION = typer.Option("eager", "--attention", help="transformers models: eager (attention's softmax shows "
                                                      "as an op) or sdpa (the fused default a user gets)")
STRICT = typer.Option(False, "--strict", envvar="KERNFORGE_STRICT",
                      help="re-raise kernforge's own errors while judging a candidate (for debugging "
                           "kernforge); by default such an error rejects the candidate with its reason")
RUNS_DIR = typer.Option(Path("runs"), "--runs-dir", envvar="KERNFORGE_RUNS_DIR",
                        help="where run folders are kept")


def _print_version(asked: bool) -> None:
    if asked:
        from kernforge import __version__

        print(f"kernforge {__version__}")
        raise typer.Exit()


@app.callback()
def _app_options(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="print kernforge's version and exit"),
) -> None:
    """The options before any command."""


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
                                  help="the model, where --llm is a URL (or to override it)"),
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

    _set_strict(strict)
    if (spec is None) == (resume is None):
        raise UserError("give a model spec to start a run, or --resume RUN_FOLDER to continue one (not both)")
    if resume is not None:
        _warn_ignored_on_resume(ctx)
        given = _given(ctx, "iterations")
        with _interruptible(), _progress(quiet=as_json) as on_event:  # what it continues: said even with --json
            result = run_resume(resume, on_event, iterations=iterations if given else None,
                                say=lambda line: err.print(line, markup=False, highlight=False, soft_wrap=True))
    else:
        asked = [item.strip() for item in ops.split(",") if item.strip()]
        opts = OptimizeOptions(spec=spec, backend=backend, proposer=proposer, strategy=strategy,
                               iterations=iterations if time_budget == "" or _given(ctx, "iterations")
                               else BUDGETED_ITERATIONS, ops=asked, time_budget=time_budget,
                               top_k=top_k if _given(ctx, "top_k") or not asked else 0, runs_dir=runs_dir,
                               candidate_timeout_s=timeout, compile=compile_peer, parallel=parallel,
                               executor=executor, gpus=gpus, ray_address=ray_address, finalists=finalists,
                               apply=apply, fuse=fuse, rank_by=rank_by,
                               model=_model_options(batch_size, seq_len, resolution, dtype, scale, attention),
                               llm=ProposerOptions(llm=llm, llm_model=llm_model, max_tokens=llm_max_tokens,
                                                   max_usd=llm_max_usd, prices=str(llm_prices or ""),
                                                   repairs=llm_repairs, timeout_s=llm_timeout,
                                                   retries=llm_retries))
        with _interruptible(), _progress(quiet=as_json) as on_event:
            result = run_optimize(opts, on_event)
    opts = result.options
    data = summary(result)
    if as_json:
        print(json.dumps(data, indent=1))
        return
    out.print(profile_table(result.capture, limit=8))
    for reason, ops in _group_skipped(data["skipped"]).items():
        out.print(f"skipped, {reason}: {ops}", markup=False, highlight=False)
    if not data["tasks"]:
        out.print(f"no op of this model has a {opts.proposer} template for the {result.backend} backend yet: "
                  "nothing was searched")
    budget = f"a time budget of {opts.time_budget}, at most " if opts.time_budget else ""
    out.print(results_table(data["tasks"], title=f"{result.backend} backend on {result.device}, "
                                                 f"{opts.strategy}, {budget}{opts.iterations} iterations per op, "
                                                 f"{result.wall_s:.0f} s"))
    for task in data["tasks"]:  # why each search ended: its budget spent, or why sooner
        if task["stopped"]:
            out.print(f"{task['task'].split('-')[0]} {task['op']}: search ended, {task['stopped']}",
                      markup=False, highlight=False)
    _print_llm_usage(data.get("llm"))
    _print_end_to_end(data.get("end_to_end"))
    out.print(phases_line(data["phases"]), markup=False, highlight=False, soft_wrap=True)
    out.print(f"run folder: {result.run_dir}")


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the user typed this option (not its default, nor an environment variable)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


# what --resume reads from the command line besides the run folder; the rest is the run's own
RESUME_READS = ("resume", "iterations", "as_json", "spec", "runs_dir")


def _warn_ignored_on_resume(ctx: typer.Context) -> None:
    ignored = [param.opts[0] for param in ctx.command.params
               if param.name not in RESUME_READS and _given(ctx, param.name)]
    if ignored:
        err.print(f"warning: --resume continues with the run's own options; ignored: {', '.join(ignored)} "
                  "(a larger --iterations is the one it takes)", markup=False, highlight=False)


class _interruptible:
    """Ctrl-C during a run: one line with its folder and the command that continues it, exit 130.
    Every candidate that finished is already in the folder (the search records each as it ends)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, error: BaseException | None, tb: object) -> None:
        from kernforge.optimize import RunInterrupted

        if isinstance(error, RunInterrupted):
            err.print(f"interrupted: {error.run_dir} keeps every candidate that finished; continue with: "
                      f"kernforge optimize --resume {shlex.quote(str(error.run_dir))}", markup=False,
                      highlight=False, soft_wrap=True)
            raise typer.Exit(130)
        if isinstance(error, KeyboardInterrupt):
            err.print("interrupted before the search began", markup=False, highlight=False)
            raise typer.Exit(130)


def _print_llm_usage(usage: dict[str, Any] | None) -> None:
    if usage:
        out.print(f"LLM {usage['model']}: {usage['calls']} calls, {usage['prompt_tokens']:,} prompt + "
                  f"{usage['completion_tokens']:,} completion tokens, ${usage['cost_usd']:.4f}, "
                  f"{usage['latency_s']:.0f} s waiting on replies", markup=False, highlight=False)


def _print_end_to_end(report: dict[str, Any] | None) -> None:
    from kernforge.report import end_to_end_tables

    if report is None:
        return
    if "error" in report:
        out.print(f"not applied to the model: {report['error']}", markup=False, highlight=False)
        return
    for item in end_to_end_tables(report):
        out.print(item, markup=False, highlight=False) if isinstance(item, str) else out.print(item)


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
    loaded_options = _model_options(batch_size, seq_len, resolution, dtype, scale, attention)
    compile_ranking(rank_by, "cpu")  # an unknown --rank-by is one line before the model loads
    loaded = load_model(spec, resolve_device(device), loaded_options)
    run_forward(loaded)
    capture = capture_model(loaded, out_dir=save, under_compile=compile_ranking(rank_by, loaded.device.type))
    if compile_warning(capture):
        err.print(compile_warning(capture), markup=False, highlight=False, soft_wrap=True)
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
    out.print(profile_table(capture, limit=limit, include_kinds=kinds))
    out.print(capture_summary(capture), markup=False, highlight=False)


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

    _set_strict(strict)
    model = _model_options(batch_size, seq_len, resolution, dtype, scale, attention)
    report = evaluate_file(EvalOptions(spec=spec, kernel_file=kernel_file, backend=backend, op=op,
                                       runs_dir=runs_dir, candidate_timeout_s=timeout, model=model,
                                       compile=compile_peer, capture=capture, recapture=recapture))
    if as_json:
        print(json.dumps(report, indent=1))
    else:
        out.print(eval_report(report), markup=False, highlight=False)
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
        out.print(eval_report({"op": t.op, "shape": t.shape_text, "dtype": t.dtype_text, "share": t.share,
                               "backend": added.backend, "device": added.device, "result": final.to_json(),
                               "input_sets": baseline.labels, "eager_errors": baseline.eager_errors,
                               "compiled": {}, "run_dir": str(root)}), markup=False, highlight=False)
        winner = f"the task's winner is now {best.node_id}" if best else "the task has no winner"
        out.print(f"added {node.node_id} to {task}: {final.status}; {winner}", markup=False, highlight=False)
    if final.status != "ok":
        raise typer.Exit(1)


@app.command("ls", epilog=LS_EXAMPLES)
def list_runs_command(runs_dir: Path = RUNS_DIR) -> None:
    """List the run folders, newest last."""
    from kernforge.report import runs_table
    from kernforge.store import list_runs

    rows = [_run_overview(store) for store in list_runs(runs_dir)]
    if not rows:
        out.print(f"no runs in {runs_dir}")
        return
    out.print(runs_table(rows))


@app.command("apply", epilog=APPLY_EXAMPLES)
def apply_command(
    run: str = typer.Argument(..., help="a run folder, or its name under --runs-dir"),
    spec: str | None = typer.Argument(None, help="the model to patch (default: the run's own spec and "
                                                 "model options)"),
    runs_dir: Path = RUNS_DIR,
    compile_model: bool = typer.Option(True, "--compile/--no-compile",
                                       help="also time the model under torch.compile, with and without "
                                            "the kernels (each kernel alone, then those that pay)"),
    attention: str | None = typer.Option(None, "--attention", help="transformers models: eager or sdpa "
                                                                   "(default: the run's)"),
    time_limit: str = typer.Option("", "--time-limit", help="the time apply may take, e.g. 90s or 5m: its "
                                                            "timing rounds are sized to fit (at least two "
                                                            "each; empty: no limit, five each)"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Install a run's winning kernels into the model, check its outputs against the original on
    the captured and fresh inputs, and time it four ways: eager, patched eager, torch.compile,
    patched under torch.compile. The report goes into the run's summary.json."""
    from kernforge.integrate.apply import apply_run
    from kernforge.search.budget import parse_duration

    limit_s = parse_duration(time_limit, "--time-limit") if time_limit else None  # before the model loads
    root = Path(run) if Path(run).is_dir() else runs_dir / run
    say = (lambda line: None) if as_json else (lambda line: err.print(line, markup=False, highlight=False))
    overrides = {"attention": attention} if attention else {}
    try:
        report = apply_run(root, spec, compile_model=compile_model, on_progress=say,
                           model_overrides=overrides, time_limit_s=limit_s).to_json()
    except UserError:
        raise
    except Exception as e:  # a kernel failing inside the model: one line (KERNFORGE_STRICT=1 re-raises)
        if os.environ.get("KERNFORGE_STRICT") == "1":
            raise
        raise UserError(f"apply failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}; "
                        "the model was left unpatched (KERNFORGE_STRICT=1 shows the traceback)") from None
    if as_json:
        print(json.dumps(report, indent=1))
        return
    _print_end_to_end(report)
    out.print(f"run folder: {root}")


@app.command("ui", epilog=UI_EXAMPLES)
def ui(
    runs_dir: Path = typer.Argument(Path("runs"), envvar="KERNFORGE_RUNS_DIR",
                                    help="the folder of run folders to show (it may not exist yet)"),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="the port to listen on (0: any free one)"),
    host: str = typer.Option("127.0.0.1", "--host", help="the address to bind; the default lets only this "
                                                         "machine in (use an SSH tunnel from elsewhere)"),
    open_browser: bool = typer.Option(False, "--open", help="open the dashboard in the default browser"),
) -> None:
    """A live web dashboard over run folders: runs, each run's hot ops and plots, each task's search
    tree, each candidate's source, diff, checks, timings and logs. It only reads the folders."""
    import socket

    try:
        import uvicorn

        from kernforge.ui.app import make_app
    except ImportError as e:
        raise UserError(f"the dashboard needs {e.name}: pip install 'kernforge[ui]'") from None
    with socket.socket() as probe:  # a port in use is one line, not uvicorn's traceback
        try:
            probe.bind((host, port))
        except OSError as e:
            raise UserError(f"cannot listen on {host}:{port} ({e.strerror}); pick another with --port") from None
        port = probe.getsockname()[1]
    url = f"http://{host}:{port}/"
    err.print(f"kernforge ui: {url} (runs in {runs_dir.resolve()}); Ctrl-C stops it", markup=False, highlight=False)
    local = host in ("127.0.0.1", "localhost", "::1")
    if not local:
        err.print(f"warning: {host} lets other machines read these runs; the default 127.0.0.1 lets only this one",
                  markup=False, highlight=False)
    # Host headers served: the bound address's names; any for a non-local bind (its names are the network's)
    hosts = ["127.0.0.1", "localhost", "[::1]", host] if local else None
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    # an open page holds an event stream: on Ctrl-C, close it after 2 s rather than wait for the browser
    uvicorn.run(make_app(runs_dir, hosts), host=host, port=port, log_level="warning", timeout_graceful_shutdown=2)


@app.command("report", epilog=REPORT_EXAMPLES)
def report(
    run: str = typer.Argument(..., help="a run folder, or its name under --runs-dir"),
    output: Path | None = typer.Option(None, "-o", "--output", help="the HTML file to write (default: "
                                                                     "RUN/report.html); the Markdown summary "
                                                                     "goes beside it as .md"),
    runs_dir: Path = RUNS_DIR,
) -> None:
    """One self-contained HTML file (no script, no outside asset) with the run's tables, plots and
    search trees, and a Markdown summary beside it: for sharing a run without a server."""
    from kernforge.report.html import report as make_report
    from kernforge.store.reader import read_run_partial

    root = Path(run) if Path(run).is_dir() else runs_dir / run
    if not (root / "config.json").is_file() and not (root / "events.jsonl").is_file():
        raise UserError(f"no run folder '{run}' (looked in {root}); see kernforge ls")
    made = make_report(read_run_partial(root))
    target = output or root / "report.html"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(made.html)
        target.with_suffix(".md").write_text(made.markdown)
    except OSError as e:
        raise UserError(f"cannot write '{target}' ({e.strerror}); pick another path with -o") from None
    out.print(f"wrote {target} and {target.with_suffix('.md')}", markup=False, highlight=False)


@app.command(epilog=SHOW_EXAMPLES)
def show(
    run: str = typer.Argument(..., help="a run folder, or its name under --runs-dir"),
    runs_dir: Path = RUNS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print the run's summary as JSON"),
) -> None:
    """Show one run: the result per op, the model end to end, every candidate tried (its time,
    speedup, status, source and rationale) and the best kernel's path."""
    from kernforge.report import candidate_lines, eval_report, phases_line, results_table, run_json
    from kernforge.store.reader import read_run, run_phases

    root = Path(run) if Path(run).is_dir() else runs_dir / run
    if not (root / "config.json").is_file():
        raise UserError(f"no run folder '{run}' (looked in {root}); see kernforge ls")
    record = read_run(root)
    data = record.store.read_json("summary.json") if (root / "summary.json").is_file() else None
    if as_json:
        print(json.dumps(run_json(record, data), indent=1))
        return
    evaluation = _evaluation_report(record)
    model = record.config.get("model_name") or "?"
    title = f"{model}: {record.backend} backend on {record.device}"
    if evaluation is not None:
        out.print(f"{model}: evaluation of {Path(record.config.get('kernel_file', '?')).name}, "
                  f"{record.backend} backend on {record.device}", markup=False, highlight=False)
        out.print(eval_report(evaluation, run_folder=False), markup=False, highlight=False, soft_wrap=True)
    elif data is None:
        out.print(f"{title}; this run did not finish: every candidate evaluated before it stopped is below",
                  markup=False, highlight=False)
    else:
        out.print(results_table(data["tasks"], title=title))
        _print_end_to_end(data.get("end_to_end"))
    for line in candidate_lines(record):
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    if data and data.get("llm"):
        _print_llm_usage(data["llm"])
    out.print(phases_line(run_phases(record.store.events())), markup=False, highlight=False, soft_wrap=True)
    out.print(f"run folder: {root}", markup=False, highlight=False, soft_wrap=True)


def _evaluation_report(record: Any) -> dict[str, Any] | None:
    """An eval's report (tasks/<task>/eval.json), where the run is an eval that finished."""
    if record.config.get("kind") != "eval" or not record.tasks:
        return None
    path = record.root / "tasks" / record.tasks[0].task.task_id / "eval.json"
    return json.loads(path.read_text()) if path.is_file() else None


@app.command("export", epilog=examples(
    "kernforge export 20261129-120000-attention -o attention_kernels",
    f"kernforge export {RUN} -o dist/kernels --name attention_kernels --force",
    "pip install ./attention_kernels   # then: import kernforge_attention_kernels as k; k.install(model)",
))
def export_command(
    run: str = typer.Argument(..., help="a run folder, or its name under --runs-dir"),
    out_dir: Path = typer.Option(..., "-o", "--out", help="the folder to write the package into: new or empty"),
    name: str = typer.Option("", "--name", help="the package's import name (default: kernforge_<model>_kernels)"),
    force: bool = typer.Option(False, "--force", help="replace an earlier export in the -o folder"),
    runs_dir: Path = RUNS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print what was exported as JSON"),
) -> None:
    """Write a run's winning kernels as a pip-installable package that needs only torch (and
    triton for Triton kernels): install(model) routes the proved calls to them, uninstall()
    takes them out; on another GPU model it warns and installs nothing unless force=True."""
    from kernforge.integrate.export import export_run

    root = Path(run) if Path(run).is_dir() else runs_dir / run
    result = export_run(root, out_dir, name=name or None, force=force)
    if as_json:
        print(json.dumps(result.to_json(), indent=1))
        return
    for kernel in result.kernels:
        out.print(f"{kernel.op} {kernel.signature}: {kernel.speedup_vs_eager:.2f}x vs eager, "
                  f"kernforge::{kernel.name}", markup=False, highlight=False)
    for task, why in result.skipped.items():
        out.print(f"not exported, {task}: {why}", markup=False, highlight=False)
    where = result.out_dir if result.out_dir.is_absolute() else f"./{result.out_dir}"
    out.print(f"package {result.package} ({len(result.kernels)} kernel{'s' * (len(result.kernels) != 1)}) in "
              f"{result.out_dir}; pip install {where}, then {result.package}.install(model)",
              markup=False, highlight=False)


def _model_options(batch_size: int | None, seq_len: int | None, resolution: int | None,
                   dtype: str | None, scale: str, attention: str) -> Any:
    """The model options every command takes, as the loader wants them; those the command's spec
    does not read are named in one warning line."""
    from kernforge.models import ModelOptions

    options = ModelOptions(batch_size=batch_size, seq_len=seq_len, resolution=resolution, dtype=dtype,
                           scale=scale, attention=attention)  # a bad value is its one error line first
    _warn_unread_model_options(get_current_context(silent=True))
    return options


# The model options each kind of spec reads (models/loader.py, models/zoo.py, models/examples/);
# dtype is read by all. A factory (pkg.module:factory) may read any, so it is not listed.
_READS = {"file": (), "torchvision": ("batch_size", "resolution"), "timm": ("batch_size", "resolution"),
          "hf": ("batch_size", "seq_len", "attention"), "diffusers": ("batch_size", "resolution")}
_EXAMPLE_READS = {"resnet50": ("batch_size", "resolution"),
                  "gemma_decoder": ("batch_size", "seq_len", "attention", "scale"),
                  "qwen_moe": ("batch_size", "seq_len", "attention", "scale"),
                  "sd35_vae_decoder": ("batch_size", "resolution", "scale")}
_SPEC_OPTIONS = ("batch_size", "seq_len", "resolution", "scale", "attention")


def _options_read(spec: str) -> tuple[str, ...] | None:
    """The model options a spec reads; None where it cannot be told (a factory, an unknown example)."""
    prefix, _, rest = spec.partition(":")
    if prefix == "example":
        return _EXAMPLE_READS.get(rest, () if rest == "attention" else None)
    if spec.endswith(".py") or Path(spec).exists():
        return _READS["file"]
    return _READS.get(prefix)


def _warn_unread_model_options(ctx: Any) -> None:
    spec = ctx.params.get("spec") if ctx else None
    reads = _options_read(spec) if spec else None
    if reads is None:
        return
    unread = [f"--{name.replace('_', '-')}" for name in _SPEC_OPTIONS if name not in reads and _given(ctx, name)]
    if unread:
        err.print(f"warning: {spec} does not read {', '.join(unread)}; ignored (it reads "
                  f"{', '.join(f'--{n.replace(chr(95), chr(45))}' for n in (*reads, 'dtype'))})",
                  markup=False, highlight=False, soft_wrap=True)


def _group_skipped(skipped: list[dict[str, Any]]) -> dict[str, str]:
    grouped: dict[str, list[str]] = {}
    for s in skipped:
        reason = s["reason"].replace(f"for {s['op']}", "").strip()
        grouped.setdefault(reason, []).append(f"{s['op']} ({s['share']:.1%})")
    return {reason: ", ".join(ops) for reason, ops in grouped.items()}


def _run_overview(store: Any) -> dict[str, Any]:
    """One row of `kernforge ls`, from the run's typed record; a folder that cannot be read says so."""
    from kernforge.store.reader import read_run

    try:
        record = read_run(store.root)
    except UserError:
        return {"run": store.root.name, "model": "?", "backend": "?", "device": "?", "tasks": 0,
                "best_speedup": None, "state": "damaged"}
    winners = [t.winner for t in record.tasks if t.winner is not None]
    speedups = [w.final.speedup_vs_eager for w in winners if w.final.speedup_vs_eager]
    if record.config.get("kind") == "eval":  # eval_file.EVAL_KIND, without importing torch here
        state = _evaluation_state(record)
    else:
        state = "finished" if (store.root / "summary.json").is_file() else "incomplete"
    return {"run": store.root.name, "model": record.config.get("model_name", "?"), "backend": record.backend,
            "device": record.device, "tasks": len(record.tasks), "best_speedup": max(speedups) if speedups else None,
            "state": state}


def _evaluation_state(record: Any) -> str:
    """An eval's folder in `ls`: its one candidate's status ("no result" where it stopped before)."""
    nodes = [n for t in record.tasks for n in t.outcome.nodes]
    return f"evaluation: {nodes[0].result.status}" if nodes else "evaluation: no result"


class _progress:
    """A live table on a terminal (one row per task: iteration, best speedup so far, counts per
    status, the latest candidate), with each candidate's line above it; plain lines otherwise;
    nothing with --json. It reads the run's typed events (store/events.py) as the store writes
    them: the same records a dashboard tails from events.jsonl."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.live: Live | None = None
        self.rows: dict[str, dict[str, str]] = {}

    def __enter__(self):
        if err.is_terminal and not self.quiet:
            self.live = Live(self._table(), console=err, refresh_per_second=4, transient=False)
            self.live.start()
        return self.on_event

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.stop()

    def on_event(self, event: Any) -> None:
        from kernforge.store import events as ev

        if self.quiet:
            return
        if isinstance(event, ev.Captured):
            ranked = ", ranked under torch.compile" if event.ranked_by == "compile" else ""
            self._say(f"captured {event.signatures} op signatures, {event.op_time_ms:.2f} ms of op time per "
                      f"forward{ranked}")
            if event.warning:
                self._say(event.warning)
        elif isinstance(event, ev.TasksChosen):
            for t in event.tasks:
                self.rows[t["task"]] = {"task": f"{t['op']} {t['shape']}", "share": f"{t['share']:.1%}",
                                        "done": "0", "total": "?", "best": "-", "counts": "", "last": "waiting"}
        elif isinstance(event, ev.TaskStarted):
            self.rows[event.task] = {**self.rows.get(event.task, {}), "task": f"{event.op} {event.shape}",
                                     "share": f"{event.share:.1%}", "done": str(event.resumed_nodes),
                                     "total": str(event.iterations), "best": "-", "counts": "", "last": "searching"}
            if not self.live:
                seeded = f", seeded from {event.seeded_from}" if event.seeded_from else ""
                self._say(f"searching {event.op} {event.shape} ({event.share:.1%} of model time), "
                          f"{event.iterations} iterations{seeded}")
        elif isinstance(event, ev.NodeFinished):
            speed = f"{event.speedup_vs_eager:.2f}x vs eager" if event.speedup_vs_eager else ""
            line = f"  {event.node} {event.status:13} {speed:16} {event.rationale[:70]}"
            standing = {"done": str(event.candidates), "best": _best_text(event.best_speedup_vs_eager),
                        "counts": _counts_text(event.counts), "last": f"{event.node} {event.status}"}
            self.rows.setdefault(event.task, _blank_row(event.task)).update(standing)
            self._say(line if self.live else f"{line}  [best {standing['best']} | {standing['counts']}]")
        elif isinstance(event, ev.Confirmed):
            speed = f"{event.speedup_vs_eager:.2f}x vs eager" if event.speedup_vs_eager else event.status
            before = f"{event.search_speedup_vs_eager:.2f}x" if event.search_speedup_vs_eager else "-"
            self._say(f"  {event.node} again, alone: {speed} (in the search {before})")
            self.rows.setdefault(event.task, _blank_row(event.task)).update(
                best=_best_text(event.best_speedup_vs_eager), last=f"{event.node} again")
        elif isinstance(event, ev.TaskEnded):
            self.rows.setdefault(event.task, _blank_row(event.task)).update(last="done")
        elif isinstance(event, ev.ApplyProgress):
            self._say(event.line)
        if self.live:
            self.live.update(self._table())

    def _table(self) -> Table:
        table = Table(title="kernforge search", title_justify="left", expand=False)
        for column in ("task", "share", "iteration", "best vs eager", "status counts", "latest"):
            table.add_column(column, no_wrap=column != "status counts")
        for row in self.rows.values():
            table.add_row(row["task"], row["share"], f"{row['done']}/{row['total']}", row["best"],
                          row["counts"], row["last"])
        return table

    def _say(self, text: str) -> None:
        if self.live:
            self.live.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=sys.stderr, flush=True)


def _blank_row(task: str) -> dict[str, str]:
    return {"task": task, "share": "", "done": "0", "total": "?", "best": "-", "counts": "", "last": ""}


def _best_text(speedup: float | None) -> str:
    """Best speedup beyond the noise so far; 1.00x until a kernel beat eager."""
    return f"{speedup:.2f}x" if speedup else "1.00x"


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def _set_strict(strict: bool) -> None:
    """The judge reads KERNFORGE_STRICT (evaluate.runner.evaluate_candidate)."""
    if strict:
        os.environ["KERNFORGE_STRICT"] = "1"


def main() -> None:
    """Every error a user can cause is one line and exit 2: kernforge's own (UserError) and the
    command line's (a bad value, an unknown option), which click would draw in a box."""
    try:
        code = app(standalone_mode=False, prog_name="kernforge")
    except UserError as e:
        err.print(f"error: {e}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except click_errors.NoArgsIsHelpError as e:
        out.print(e.ctx.get_help() if e.ctx else "", markup=False, highlight=False)
        sys.exit(0)
    except click_errors.ClickException as e:
        where = getattr(e, "ctx", None)
        hint = f" (see {where.command_path} --help)" if where is not None else ""
        err.print(f"error: {' '.join(e.format_message().split())}{hint}", markup=False, highlight=False,
                  soft_wrap=True)
        sys.exit(e.exit_code)
    except typer.Abort:
        err.print("aborted", markup=False, highlight=False)
        sys.exit(1)
    except KeyboardInterrupt:
        err.print("interrupted; the run folder keeps every candidate that finished")
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
