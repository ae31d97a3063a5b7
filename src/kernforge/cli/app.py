"""The typer app, its own options, and the examples each command's help ends with."""

from __future__ import annotations

import typer

try:  # typer 0.2x carries its own copy of click; main() and the options read these
    from typer._click import exceptions as click_errors  # noqa: F401
    from typer._click.globals import get_current_context  # noqa: F401
except ImportError:
    from click import exceptions as click_errors  # noqa: F401
    from click import get_current_context  # noqa: F401


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
