"""ls, show, report, ui: reading the run folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from kernforge.errors import UserError
from kernforge.records import EndToEnd, VariantName

from kernforge.cli import console
from kernforge.cli.app import LS_EXAMPLES, REPORT_EXAMPLES, SHOW_EXAMPLES, UI_EXAMPLES, app
from kernforge.cli.console import print_end_to_end, print_llm_usage
from kernforge.cli.options import RUNS_DIR


@app.command("ls", epilog=LS_EXAMPLES)
def list_runs_command(runs_dir: Path = RUNS_DIR) -> None:
    """List the run folders, newest last."""
    from kernforge.report import runs_table
    from kernforge.store import list_runs

    rows = [_run_overview(store) for store in list_runs(runs_dir)]
    if not rows:
        console.out.print(f"no runs in {runs_dir}")
        return
    console.out.print(runs_table(rows))


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
    console.err.print(f"kernforge ui: {url} (runs in {runs_dir.resolve()}); Ctrl-C stops it", markup=False, highlight=False)
    local = host in ("127.0.0.1", "localhost", "::1")
    if not local:
        console.err.print(f"warning: {host} lets other machines read these runs; the default 127.0.0.1 lets only this one",
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
    from kernforge.search.runs import read_run_partial

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
    console.out.print(f"wrote {target} and {target.with_suffix('.md')}", markup=False, highlight=False)


@app.command(epilog=SHOW_EXAMPLES)
def show(
    run: str = typer.Argument(..., help="a run folder, or its name under --runs-dir"),
    runs_dir: Path = RUNS_DIR,
    as_json: bool = typer.Option(False, "--json", help="print the run's summary as JSON"),
) -> None:
    """Show one run: the result per op, the model end to end, every candidate tried (its time,
    speedup, status, source and rationale) and the best kernel's path."""
    from kernforge.report import candidate_lines, eval_report, phases_line, results_table, run_json
    from kernforge.search.runs import read_run, run_phases

    root = Path(run) if Path(run).is_dir() else runs_dir / run
    if not (root / "config.json").is_file():
        raise UserError(f"no run folder '{run}' (looked in {root}); see kernforge ls")
    record = read_run(root)
    data = record.store.summary()
    if as_json:
        print(json.dumps(run_json(record, data.to_json() if data else None), indent=1))
        return
    evaluation = _evaluation_report(record)
    model = record.settings.model_name or "?"
    title = f"{model}: {record.backend} backend on {record.device}"
    if evaluation is not None:
        console.out.print(f"{model}: evaluation of {Path(record.config.get('kernel_file', '?')).name}, "
                  f"{record.backend} backend on {record.device}", markup=False, highlight=False)
        console.out.print(eval_report(evaluation, run_folder=False), markup=False, highlight=False, soft_wrap=True)
    elif data is None:
        console.out.print(f"{title}; this run did not finish: every candidate evaluated before it stopped is below",
                  markup=False, highlight=False)
    else:
        console.out.print(results_table(data.tasks, title=title))
        print_end_to_end(data.end_to_end)
    for line in candidate_lines(record):
        console.out.print(line, markup=False, highlight=False, soft_wrap=True)
    if data and data.llm:
        print_llm_usage(data.llm)
    console.out.print(phases_line(run_phases(record.store.events())), markup=False, highlight=False, soft_wrap=True)
    console.out.print(f"run folder: {root}", markup=False, highlight=False, soft_wrap=True)


def _evaluation_report(record: Any) -> dict[str, Any] | None:
    """An eval's report (tasks/<task>/eval.json), where the run is an eval that finished."""
    if record.settings.kind != "eval" or not record.tasks:
        return None
    path = record.root / "tasks" / record.tasks[0].task.task_id / "eval.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _run_overview(store: Any) -> dict[str, Any]:
    """One row of `kernforge ls`, from the run's typed record; a folder that cannot be read says so."""
    from kernforge.search.runs import read_run

    try:
        record = read_run(store.root)
    except UserError:
        return {"run": store.root.name, "model": "?", "backend": "?", "device": "?", "tasks": 0,
                "best_speedup": None, "end_to_end": "-", "state": "damaged"}
    winners = [t.winner for t in record.tasks if t.winner is not None]
    speedups = [w.final.speedup_vs_eager for w in winners if w.final.speedup_vs_eager]
    if record.settings.kind == "eval":
        state = _evaluation_state(record)
    else:
        state = "finished" if (store.root / "summary.json").is_file() else "incomplete"
    summary = store.summary()
    return {"run": store.root.name, "model": record.settings.model_name or "?", "backend": record.backend,
            "device": record.device, "tasks": len(record.tasks), "best_speedup": max(speedups) if speedups else None,
            "end_to_end": _end_to_end_cell(summary.end_to_end if summary else None), "state": state}


# `ls`'s end-to-end cell: the patched model against the unpatched one, eager then compiled
END_TO_END_SHOWN = ((VariantName.PATCHED_EAGER, "eager"), (VariantName.PATCHED_COMPILE, "compile"))


def _end_to_end_cell(report: EndToEnd | None) -> str:
    """The model end to end as apply measured it ("1.33x eager (faster), 1.10x compile (within
    noise)"), "not applied", or apply's error in a few words."""
    if report is None:
        return "not applied"
    if report.error:
        return f"apply failed: {report.error[:60]}"
    parts = []
    for variant, label in END_TO_END_SHOWN:
        c = report.comparison(variant)
        if c and c.speedup:  # the verdict only where kernels were in it: else the model as it is
            parts.append(f"{c.speedup:.2f}x {label}" + (f" ({c.verdict})" if c.installed else ""))
    return ", ".join(parts) or "no timing"


def _evaluation_state(record: Any) -> str:
    """An eval's folder in `ls`: its one candidate's status ("no result" where it stopped before)."""
    nodes = [n for t in record.tasks for n in t.outcome.nodes]
    return f"evaluation: {nodes[0].result.status}" if nodes else "evaluation: no result"
