"""The options several commands share, and what they mean for the model spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from kernforge.errors import set_strict

from kernforge.cli import console
from kernforge.cli.app import get_current_context
from kernforge.models.loader import SPEC_OPTIONS, options_read


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


def given(ctx: typer.Context, name: str) -> bool:
    """Whether the user typed this option (not its default, nor an environment variable)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def model_options(batch_size: int | None, seq_len: int | None, resolution: int | None,
                   dtype: str | None, scale: str, attention: str) -> Any:
    """The model options every command takes, as the loader wants them; those the command's spec
    does not read are named in one warning line."""
    from kernforge.models import ModelOptions

    options = ModelOptions(batch_size=batch_size, seq_len=seq_len, resolution=resolution, dtype=dtype,
                           scale=scale, attention=attention)  # a bad value is its one error line first
    warn_unread_model_options(get_current_context(silent=True))
    return options


def warn_unread_model_options(ctx: Any) -> None:
    spec = ctx.params.get("spec") if ctx else None
    reads = options_read(spec) if spec else None
    if reads is None:
        return
    unread = [f"--{name.replace('_', '-')}" for name in SPEC_OPTIONS if name not in reads and given(ctx, name)]
    if unread:
        console.err.print(f"warning: {spec} does not read {', '.join(unread)}; ignored (it reads "
                  f"{', '.join(f'--{n.replace(chr(95), chr(45))}' for n in (*reads, 'dtype'))})",
                  markup=False, highlight=False, soft_wrap=True)


def set_strict_mode(strict: bool) -> None:
    if strict:
        set_strict(True)
