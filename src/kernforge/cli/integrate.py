"""apply, export: the winners installed into the model, and shipped as a package."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kernforge.errors import UserError
from kernforge.errors import strict as strict_mode

from kernforge.cli import console
from kernforge.cli.app import APPLY_EXAMPLES, RUN, app, examples
from kernforge.cli.console import print_end_to_end
from kernforge.cli.options import RUNS_DIR


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
    say = (lambda line: None) if as_json else (lambda line: console.err.print(line, markup=False, highlight=False))
    overrides = {"attention": attention} if attention else {}
    try:
        report = apply_run(root, spec, compile_model=compile_model, on_progress=say,
                           model_overrides=overrides, time_limit_s=limit_s)
    except UserError:
        raise
    except Exception as e:  # a kernel failing inside the model: one line (KERNFORGE_STRICT=1 re-raises)
        if strict_mode():
            raise
        raise UserError(f"apply failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}; "
                        "the model was left unpatched (KERNFORGE_STRICT=1 shows the traceback)") from None
    if as_json:
        print(json.dumps(report.to_json(), indent=1))
        return
    print_end_to_end(report)
    console.out.print(f"run folder: {root}")


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
        console.out.print(f"{kernel.op} {kernel.signature}: {kernel.speedup_vs_eager:.2f}x vs eager, "
                  f"kernforge::{kernel.name}", markup=False, highlight=False)
    for task, why in result.skipped.items():
        console.out.print(f"not exported, {task}: {why}", markup=False, highlight=False)
    where = result.out_dir if result.out_dir.is_absolute() else f"./{result.out_dir}"
    console.out.print(f"package {result.package} ({len(result.kernels)} kernel{'s' * (len(result.kernels) != 1)}) in "
              f"{result.out_dir}; pip install {where}, then {result.package}.install(model)",
              markup=False, highlight=False)
